# layer.sh (sourced by kb.sh and kc.sh with L set): ResNet-50 layer $L of resnet.txt
# (name F C H W R S stride pad) as its kernel text CK, output extent P x Q, and its default
# config text `def` as the CLI emits it (into ${L}_default/).
here=$(dirname "${BASH_SOURCE[0]}")
read n F C H W R S st pad < <(grep "^$L " "$here/resnet.txt")
P=$(( (H + 2*pad - R) / st + 1 )); Q=$(( (W + 2*pad - S) / st + 1 ))
if [ $pad -gt 0 ]; then xi="$st * p + r - $pad, $st * q + s - $pad"; else xi="$st * p + r, $st * q + s"; fi
[ $st = 1 ] && xi=$(echo "$xi" | sed 's/1 \* //g')
CK="y[[n, f, p, q]] += x[[n, c, $xi]] * w[[f, c, r, s]]"
rm -rf ${L}_default; /work/main/target/release/tensor-dsl emit --kernel "$CK" --shapes x=1x${C}x${H}x${W},w=${F}x${C}x${R}x${S},y=1x${F}x${P}x${Q} --configs default --out ${L}_default >/dev/null
def=$(grep -o '"config": "[^"]*"' ${L}_default/config_0000.json | sed 's/"config": "//; s/"$//')
