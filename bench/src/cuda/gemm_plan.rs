//! Mapping a row-major (or any unit-stride) batched matmul onto cuBLAS's column-major
//! `sgemmStridedBatched`, as a pure function so it is tested without a GPU (against a CPU
//! model of cuBLAS's semantics).
//!
//! We want `C[b] = A[b] · B[b]` where every operand is a matrix given by a row stride, a
//! column stride and a batch stride (in elements). cuBLAS computes `Y = op(L) · op(R)` on
//! column-major matrices. If `C`'s columns are contiguous (`csc == 1`) its memory is the
//! column-major `Cᵀ`, so we ask cuBLAS for `Cᵀ = Bᵀ · Aᵀ` (operands swapped); if its rows are
//! contiguous (`rsc == 1`) its memory is column-major `C` and we ask for `C = A · B`. Each
//! operand's memory is likewise column-major `X` (`rs == 1`) or `Xᵀ` (`cs == 1`); `op` is a
//! transpose exactly when that is not the matrix cuBLAS needs.

/// One operand: logical `rows × cols`, element strides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
    /// Elements between consecutive batches.
    pub bs: usize,
}

/// A cuBLAS `sgemmStridedBatched` call: `Y = op(L) · op(R)`, `Y` column-major `m × n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `L` is the matmul's right operand `B` (and `R` is `A`): `Y = Cᵀ`.
    pub swap: bool,
    pub trans_l: bool,
    pub trans_r: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ld_l: usize,
    pub ld_r: usize,
    pub ld_y: usize,
    pub stride_l: usize,
    pub stride_r: usize,
    pub stride_y: usize,
    pub batch: usize,
}

/// How `x`'s memory serves as the column-major matrix `X` (`want_transposed` false) or `Xᵀ`:
/// (transpose flag, leading dimension).
fn operand(x: &Operand, want_transposed: bool, what: &str) -> Result<(bool, usize), String> {
    if x.cs == 1 || x.cols == 1 && x.rs != 1 {
        // Column-major Xᵀ (cols × rows); the leading dimension is the row stride.
        let ld = if x.rows == 1 { x.cols } else { x.rs };
        Ok((!want_transposed, ld.max(x.cols).max(1)))
    } else if x.rs == 1 || x.rows == 1 {
        // Column-major X (rows × cols).
        let ld = if x.cols == 1 { x.rows } else { x.cs };
        Ok((want_transposed, ld.max(x.rows).max(1)))
    } else {
        Err(format!(
            "{what} has no unit stride along a matrix axis (strides {} and {}): cuBLAS cannot \
             read it without a copy",
            x.rs, x.cs
        ))
    }
}

/// The cuBLAS call for `C = A · B` over `batch` matrices (`a`: m×k, `b`: k×n, `c`: m×n).
pub fn plan(a: &Operand, b: &Operand, c: &Operand, batch: usize) -> Result<Plan, String> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k || c.rows != m || c.cols != n {
        return Err(format!(
            "shapes do not chain: A {}×{}, B {}×{}, C {}×{}",
            a.rows, a.cols, b.rows, b.cols, c.rows, c.cols
        ));
    }
    if c.cs == 1 || n == 1 && c.rs != 1 {
        // Y = Cᵀ (n × m) = Bᵀ · Aᵀ.
        let (trans_l, ld_l) = operand(b, true, "the right operand")?;
        let (trans_r, ld_r) = operand(a, true, "the left operand")?;
        Ok(Plan {
            swap: true,
            trans_l,
            trans_r,
            m: n,
            n: m,
            k,
            ld_l,
            ld_r,
            ld_y: if m == 1 { n.max(1) } else { c.rs.max(n) },
            stride_l: b.bs,
            stride_r: a.bs,
            stride_y: c.bs,
            batch,
        })
    } else if c.rs == 1 || m == 1 {
        // Y = C (m × n) = A · B.
        let (trans_l, ld_l) = operand(a, false, "the left operand")?;
        let (trans_r, ld_r) = operand(b, false, "the right operand")?;
        Ok(Plan {
            swap: false,
            trans_l,
            trans_r,
            m,
            n,
            k,
            ld_l,
            ld_r,
            ld_y: if n == 1 { m.max(1) } else { c.cs.max(m) },
            stride_l: a.bs,
            stride_r: b.bs,
            stride_y: c.bs,
            batch,
        })
    } else {
        Err(format!(
            "the output has no unit stride along a matrix axis (strides {} and {})",
            c.rs, c.cs
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::Strides;

    /// cuBLAS `sgemmStridedBatched` semantics (column-major, alpha 1, beta 0) on the CPU.
    fn cublas_model(p: &Plan, l: &[f32], r: &[f32], y: &mut [f32]) {
        // op(X)[i][j] for a column-major X with leading dimension ld.
        let at = |x: &[f32], base: usize, ld: usize, t: bool, i: usize, j: usize| {
            if t {
                x[base + j + i * ld]
            } else {
                x[base + i + j * ld]
            }
        };
        for b in 0..p.batch {
            for i in 0..p.m {
                for j in 0..p.n {
                    let mut s = 0.0;
                    for q in 0..p.k {
                        s += at(l, b * p.stride_l, p.ld_l, p.trans_l, i, q)
                            * at(r, b * p.stride_r, p.ld_r, p.trans_r, q, j);
                    }
                    y[b * p.stride_y + i + j * p.ld_y] = s;
                }
            }
        }
    }

    fn permutations(s: &str) -> Vec<String> {
        if s.len() <= 1 {
            return vec![s.to_string()];
        }
        let mut out = Vec::new();
        for (i, c) in s.char_indices() {
            let rest: String = s
                .chars()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, c)| c)
                .collect();
            for p in permutations(&rest) {
                out.push(format!("{c}{p}"));
            }
        }
        out
    }

    /// Every layout of the three tensors (batch axis anywhere), on awkward sizes: the plan
    /// either reproduces the row-major batched matmul exactly or says why it cannot.
    #[test]
    fn every_layout_maps_to_cublas_or_says_why() {
        let (nb, m, n, k) = (3usize, 5usize, 4usize, 7usize);
        let size = |c: char| match c {
            'b' => nb,
            'm' => m,
            'n' => n,
            _ => k,
        };
        let mut mapped = 0;
        for lhs in permutations("bmk") {
            for rhs in permutations("bkn") {
                for out in permutations("bmn") {
                    let (la, lb, lc) = (
                        Strides::row_major(&lhs, size),
                        Strides::row_major(&rhs, size),
                        Strides::row_major(&out, size),
                    );
                    let (sa, sb, sc) = (|c| la.of(c), |c| lb.of(c), |c| lc.of(c));
                    let a = Operand {
                        rows: m,
                        cols: k,
                        rs: sa('m'),
                        cs: sa('k'),
                        bs: sa('b'),
                    };
                    let b = Operand {
                        rows: k,
                        cols: n,
                        rs: sb('k'),
                        cs: sb('n'),
                        bs: sb('b'),
                    };
                    let c = Operand {
                        rows: m,
                        cols: n,
                        rs: sc('m'),
                        cs: sc('n'),
                        bs: sc('b'),
                    };
                    let ad: Vec<f32> = (0..nb * m * k).map(|i| (i % 13) as f32 - 6.0).collect();
                    let bd: Vec<f32> = (0..nb * k * n).map(|i| (i % 7) as f32 - 3.0).collect();
                    let mut want = vec![0.0f32; nb * m * n];
                    for bi in 0..nb {
                        for i in 0..m {
                            for j in 0..n {
                                let mut s = 0.0;
                                for q in 0..k {
                                    s += ad[bi * a.bs + i * a.rs + q * a.cs]
                                        * bd[bi * b.bs + q * b.rs + j * b.cs];
                                }
                                want[bi * c.bs + i * c.rs + j * c.cs] = s;
                            }
                        }
                    }
                    let unit = |o: &Operand| o.rs == 1 || o.cs == 1;
                    match plan(&a, &b, &c, nb) {
                        Ok(p) => {
                            let (l, r) = if p.swap { (&bd, &ad) } else { (&ad, &bd) };
                            let mut got = vec![f32::NAN; nb * m * n];
                            cublas_model(&p, l, r, &mut got);
                            assert_eq!(got, want, "{lhs},{rhs}->{out}: {p:?}");
                            mapped += 1;
                        }
                        Err(e) => assert!(
                            !(unit(&a) && unit(&b) && unit(&c)),
                            "{lhs},{rhs}->{out} has unit strides but was refused: {e}"
                        ),
                    }
                }
            }
        }
        // Layouts with the batch axis innermost somewhere are refused; most are not.
        assert!(mapped >= 64, "only {mapped} layouts mapped");
    }

    #[test]
    fn row_major_matmul_is_the_usual_swap() {
        let (m, n, k) = (128, 768, 3072);
        let a = Operand {
            rows: m,
            cols: k,
            rs: k,
            cs: 1,
            bs: 0,
        };
        let b = Operand {
            rows: k,
            cols: n,
            rs: n,
            cs: 1,
            bs: 0,
        };
        let c = Operand {
            rows: m,
            cols: n,
            rs: n,
            cs: 1,
            bs: 0,
        };
        let p = plan(&a, &b, &c, 1).unwrap();
        assert!(p.swap && !p.trans_l && !p.trans_r);
        assert_eq!((p.m, p.n, p.k, p.ld_l, p.ld_r, p.ld_y), (n, m, k, n, k, n));
        let bad = Operand {
            rows: k,
            cols: n,
            rs: 2 * n,
            cs: 2,
            bs: 0,
        };
        assert!(plan(&a, &bad, &c, 1).unwrap_err().contains("unit stride"));
    }
}
