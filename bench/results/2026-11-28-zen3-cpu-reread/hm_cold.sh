#!/bin/bash
# hm_cold: hm.c of 2026-11-27-zen4-cpu-wide-tile without the untimed call before each block of
# timed calls, so that with BLOCK=1 every timed call follows another library's.
here=$(dirname "$0")
sed 's|for(int l=0;l<L;l++){ f\[l\](args\[l\],bufs\[n-1\]); for|for(int l=0;l<L;l++){ for|' \
  "$here/../2026-11-27-zen4-cpu-wide-tile/hm.c" > hm_cold.c
grep -q 'for(int l=0;l<L;l++){ for' hm_cold.c || { echo "hm_cold.sh: hm.c changed" >&2; exit 1; }
gcc -O2 -o hm_cold hm_cold.c -ldl
