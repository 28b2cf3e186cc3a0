#!/usr/bin/env python3
"""
embed.py -- a header of vm/cuda/ and every header it includes with quotes,
as one text in a C++ string, so that the plugin can hand it to NVRTC at
run time (vm/cuda/jit.cu) with no file of the source tree at hand:

  python3 vm/cuda/embed.py vm/cuda/mods_kernels.cuh qkv_cu_mods_text OUT.cu

Each file is inlined at its first #include "..." (a path relative to the
including file) and skipped after, with #line lines so that NVRTC's
messages name the real files; #include <...> lines stay (the plugin gives
NVRTC its own small forms of those, the host simulation's compiler the
system's).  The Makefile and tests/tools/cudasim/build.sh run it.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')


def inline(path, root, seen, out):
    path = os.path.normpath(path)
    if path in seen:
        return
    seen.add(path)
    name = os.path.relpath(path, root)
    out.append('#line 1 "%s"' % name)
    with open(path) as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                inline(os.path.join(os.path.dirname(path), m.group(1)), root, seen, out)
                out.append('#line %d "%s"' % (n + 1, name))
            else:
                out.append(line.rstrip('\n'))


def main():
    src, symbol, dst = sys.argv[1], sys.argv[2], sys.argv[3]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(src))))
    out = []
    inline(os.path.abspath(src), root, set(), out)
    text = '\n'.join(out) + '\n'
    if ')qkv"' in text:
        sys.exit('embed.py: %s holds the string\'s end marker' % src)
    with open(dst + '.new', 'w') as f:
        f.write('/* made by vm/cuda/embed.py from %s: do not edit */\n' % os.path.relpath(src, root))
        f.write('extern const char %s[];\n' % symbol)
        f.write('const char %s[] = R"qkv(%s)qkv";\n' % (symbol, text))
    os.replace(dst + '.new', dst)


if __name__ == '__main__':
    main()
