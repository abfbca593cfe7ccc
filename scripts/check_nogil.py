"""Lists Python-touching lines (cython -a score > 0) inside `nogil` functions.

    make annotate && python scripts/check_nogil.py

A clean hot path prints nothing for that file and exits 0."""
import glob
import re
import sys

bad = 0
for html_path in sorted(glob.glob("engine/*.html") + glob.glob("traverser/*.html")):
    pyx = html_path[:-5] + ".pyx"
    src = open(pyx).read().splitlines()
    scores = {}
    for m in re.finditer(r'<pre class="cython line score-(\d+)"[^>]*>\+?<span class="">(\d+)</span>', open(html_path).read()):
        scores[int(m.group(2))] = int(m.group(1))
    in_nogil, name, signature = False, None, None
    for i, line in enumerate(src, 1):
        if signature is not None:                 # a signature spanning lines
            signature += line
            if line.rstrip().endswith(":"):
                in_nogil, signature = "nogil" in signature, None
            continue
        if re.match(r"(cdef|cpdef|def|class)\b", line):
            name = line.strip()
            if line.rstrip().endswith(":"):
                in_nogil = "nogil" in line
            else:
                signature = line
            continue
        if line[:1] not in ("", " ", "\t", "#"):   # any other top-level statement ends a function
            in_nogil = False
        if in_nogil and scores.get(i, 0) > 0 and line.strip() and not line.strip().startswith("#"):
            print(f"{pyx}:{i}: score {scores[i]} in {name[:60]}: {line.strip()}")
            bad += 1
sys.exit(1 if bad else 0)
