#!/bin/bash
# mk2.sh BIN NAME KERNEL SHAPES -> NAME.so (default config)
set -e
bin=$1; name=$2; kernel=$3; shapes=$4
d=/tmp/e/src_$name; rm -rf $d
$bin emit --kernel "$kernel" --shapes "$shapes" --configs default --out $d >/dev/null
gcc -O3 -fPIC -shared -fno-math-errno -march=native -fopenmp -o /tmp/e/$name.so $d/config_0000.c
grep -o '"config": "[^"]*"' $d/config_0000.json
