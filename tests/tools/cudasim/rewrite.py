#!/usr/bin/env python3
"""
rewrite.py -- turns one vm/cuda/*.cu file into C++ that g++ compiles
against tests/tools/cudasim/cudasim.h (build.sh runs it on every file):

  python3 rewrite.py vm/cuda/X.cu build/cudasim/gen/X.cpp

Two rewrites, nothing else (the file's own lines and line numbers are
kept, and a #line makes diagnostics name the real file):

  k<<<grid, block[, smem[, stream]]>>>(args)
      -> sim_launch(sim_cfg(grid, block[, smem[, stream]]), "k", k, args)
  extern __shared__ [__align__(n)] T name[];
      -> T *name = (T *)sim_dynamic_smem();

It fails (exit 1) when a <<< is left that it could not rewrite, so that a
new launch form is noticed rather than miscompiled.
"""
import re
import sys

LAUNCH = re.compile(r'([A-Za-z_][\w:]*(?:<[^;<>()]*>)?)\s*<<<(.*?)>>>\s*\(\s*(\)?)', re.S)
DYNSMEM = re.compile(r'extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?'
                     r'([A-Za-z_][\w:<> ]*?)\s+([A-Za-z_]\w*)\s*\[\s*\]\s*;')


def launch(m):
    name, cfg, empty = m.group(1), m.group(2), m.group(3)
    quoted = name.replace('"', '\\"')
    head = 'sim_launch(sim_cfg(%s), "%s", %s' % (cfg, quoted, name)
    return head + ')' if empty else head + ', '


def main():
    src, dst = sys.argv[1], sys.argv[2]
    text = open(src).read()
    want = text.count('<<<')
    text, n = LAUNCH.subn(launch, text)
    text = DYNSMEM.sub(lambda m: '%s *%s = (%s *)sim_dynamic_smem();'
                       % (m.group(1), m.group(2), m.group(1)), text)
    if n != want or '<<<' in text or re.search(r'extern\s+__shared__', text):
        sys.exit('rewrite.py: %s: rewrote %d of %d launches, or an extern __shared__ is left'
                 % (src, n, want))
    with open(dst, 'w') as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(text)


if __name__ == '__main__':
    main()
