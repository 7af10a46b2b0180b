#!/bin/bash
# first_load.py twice (converting, then cached) per tree and GGUF, each tree in a fresh models cache whose kernels
# folder is the user's own (the same kernel source in both trees: no rebuild); prints time, peak RSS and cache size.
# usage: run.sh OLD_TREE NEW_TREE GGUF...
here=$(cd "$(dirname "$0")" && pwd); old=$1; new=$2; shift 2
for gguf in "$@"; do
  for tree in "$old" "$new"; do
    home=$(mktemp -d); mkdir -p "$home"; ln -s ~/.cache/multidraft/kernels "$home/kernels"
    for pass in convert cached; do
      echo "== $(basename "$gguf") tree=$tree pass=$pass"
      MULTIDRAFT_HOME=$home PYTHONPATH=$tree/src /usr/bin/time -f "wall_s=%e peak_rss_kb=%M" \
        /work/main/.venv/bin/python "$here/first_load.py" "$gguf" 2>&1 | grep -E "^load_s|^wall_s"
    done
    echo "models cache: $(du -sh "$home/models" | cut -f1)"; rm -rf "$home"
  done
done
