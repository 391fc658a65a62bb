#!/usr/bin/env python3
"""Prints the functions a callgrind profile saw executing, one symbol per line, in the order
they first appear in it: a linker ordering file (scripts/order-sections.sh for the full-Swift
fire-agent, cross/embedded/order.sh for the Embedded one). Names with spaces (demangled) and
bare addresses are left out. Usage: callgrind-order.py CALLGRIND_OUT > ORDER_FILE"""
import re
import sys

names, seen, table = [], set(), {}
for line in open(sys.argv[1]):
    m = re.match(r"^c?fn=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
    if not m:
        continue
    if m.group(2):
        table[m.group(1)] = m.group(2)
    name = table.get(m.group(1))
    if line.startswith("fn=") and name and name not in seen and " " not in name and not name.startswith("0x"):
        seen.add(name)
        names.append(name)
print("\n".join(names))
