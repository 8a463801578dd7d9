#!/bin/bash
# mk.sh NAME KERNEL SHAPES CONFIG  -> NAME.so (CONFIG: default or config text)
set -e
name=$1; kernel=$2; shapes=$3; cfg=$4
d=/tmp/e/src_$name; rm -rf $d
if [ "$cfg" = default ]; then c=default; else c="config:$cfg"; fi
/work/main/target/release/tensor-dsl emit --kernel "$kernel" --shapes "$shapes" --configs "$c" --out $d >/dev/null
gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -o /tmp/e/$name.so $d/config_0000.c
grep -o '"config": "[^"]*"' $d/config_0000.json
