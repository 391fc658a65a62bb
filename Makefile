# Shortcuts; the scripts are the real interface (README, cross/README.md).
CACHE ?= /var/cache/tinyfire-cross

.PHONY: test demo cross cross-dynamic cross-test cross-all cross-clean

test:            ## every test, as CI runs it
	scripts/test.sh

demo:            ## fire-agent end to end against local servers
	scripts/demo.sh

cross:           ## aarch64 fire-agent (fully static) + smoke test under qemu; sets up the toolchain once
	TINYFIRE_CROSS_CACHE=$(CACHE) cross/smoke.sh "$$(cross/build.sh static $(CACHE))"

cross-dynamic:   ## aarch64 fire-agent against the Swift runtime as shared libraries + smoke test
	TINYFIRE_CROSS_CACHE=$(CACHE) cross/smoke.sh "$$(cross/build.sh dynamic $(CACHE))"

cross-test:      ## the library's test suite cross-built and run under qemu-aarch64
	cross/test.sh $(CACHE)

cross-all:       ## all of the above (what CI runs)
	cross/all.sh $(CACHE)

cross-clean:     ## delete the toolchain cache and the cross build outputs
	cross/clean.sh $(CACHE)
