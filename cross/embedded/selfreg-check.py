#!/usr/bin/env python3
"""Lists the functions in compiled objects that write Swift's self register and return without
having saved it: r10 on armv7, x20 on aarch64. A caller keeps `self` in that register across
calls (it is callee-saved), so such a function makes the caller's next method call on the same
value read the wrong memory (cross/README.md, "armv7: the self register").

Usage: selfreg-check.py armv7|aarch64 OBJECT...    Exit status 1 when any function does it.
On aarch64 the machine outliner moves prologues (the saves) into shared fragments that a scan of
an object cannot follow, so the scan reports functions that do save x20; build.sh runs it on
armv7 objects only (no outlined fragments there)."""
import re, subprocess, sys
arch, objs = sys.argv[1], sys.argv[2:]
reg = {"armv7": "r10", "aarch64": "x20"}[arch]
r = re.compile(rf"\b{reg}\b")
bad = []
for obj in objs:
    out = subprocess.run(["/opt/swift/usr/bin/llvm-objdump", "-d", "--no-show-raw-insn", obj], capture_output=True, text=True, check=True).stdout
    func, saves, returns, writes = None, False, False, []
    def flush():
        if func and writes and not saves and returns and not func.startswith("OUTLINED_FUNCTION_"):
            bad.append((obj, func, writes[:3]))
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            flush()
            func, saves, returns, writes = m.group(1), False, False, []
            continue
        m = re.match(r"^\s+[0-9a-f]+:\s+(\S+)\s*(.*)$", line)
        if not m:
            continue
        op, args = m.group(1), m.group(2)
        operands = args.split("@")[0].split("//")[0]
        if arch == "armv7":
            if op.startswith(("push", "stmdb", "stmfd")) and r.search(operands):
                saves = True
            if (op.startswith("pop") and "pc" in operands) or op == "bx" and operands.strip() == "lr":
                returns = True
            if f"{reg}!" in operands:
                writes.append(f"{op} {operands}")
            elif op.startswith(("ldm", "pop")):
                if re.search(rf"\{{[^}}]*\b{reg}\b", operands):
                    writes.append(f"{op} {operands}")
            elif re.match(rf"{reg}\b", operands) and not op.startswith(("str", "cmp", "cmn", "tst", "teq", "vst", "stm", "push", "vld", "pld", "b")):
                writes.append(f"{op} {operands}")
        else:
            if op.startswith(("stp", "str")) and r.search(operands.split("[")[0]) and "[sp" in operands:
                saves = True
            if op == "ret":
                returns = True
            if re.search(rf"\[{reg}(, #[^\]]*)?\]!|\[{reg}\], ", operands):
                writes.append(f"{op} {operands}")
            elif op.startswith("ldp") and r.search(operands.split("[")[0]):
                writes.append(f"{op} {operands}")
            elif re.match(rf"{reg}\b", operands) and not op.startswith(("st", "cmp", "cmn", "tst", "b", "prfm", "cb", "tb")):
                writes.append(f"{op} {operands}")
    flush()
for obj, func, w in bad:
    print(f"{obj}: {func}: {'; '.join(w)}")
print(f"{arch}: {len(bad)} functions write {reg} (Swift's self register) and return without saving it", file=sys.stderr)
sys.exit(1 if bad else 0)
