//! Permutation knobs: an order of `n` items, e.g. of loops.

use rand::seq::SliceRandom;
use rand::Rng;

use super::bfs_ball;

/// An order of the items `0..n`. One hop swaps two positions; the hop distance is the
/// fewest swaps, `n − (number of cycles of a⁻¹∘b)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    n: usize,
}

impl Permutation {
    /// Orders of `n >= 1` items.
    pub fn new(n: usize) -> Self {
        Permutation { n }
    }

    /// The number of items.
    pub fn items(&self) -> usize {
        self.n
    }

    /// `n!`, saturating at `u128::MAX`.
    pub fn size(&self) -> u128 {
        (1..=self.n as u128).fold(1u128, |acc, k| acc.saturating_mul(k))
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.n == 0 {
            return Err("a permutation needs at least one item".into());
        }
        Ok(())
    }

    pub(crate) fn check(&self, v: &[usize]) -> Result<(), String> {
        if v.len() != self.n {
            return Err(format!("expected an order of {} items, got {v:?}", self.n));
        }
        let mut seen = vec![false; self.n];
        for &item in v {
            match seen.get_mut(item) {
                Some(s) if !*s => *s = true,
                _ => {
                    return Err(format!(
                        "{v:?} is not an order of 0..{}: each item must appear once",
                        self.n
                    ))
                }
            }
        }
        Ok(())
    }

    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.n).collect();
        v.shuffle(rng);
        v
    }

    /// Every order, in ascending (lexicographic) order.
    pub(crate) fn enumerate(&self) -> Vec<Vec<usize>> {
        let mut v: Vec<usize> = (0..self.n).collect();
        let mut out = vec![v.clone()];
        while next_permutation(&mut v) {
            out.push(v.clone());
        }
        out
    }

    /// Every swap of two positions.
    pub(crate) fn neighbors(&self, v: &[usize]) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for i in 0..v.len() {
            for j in i + 1..v.len() {
                let mut w = v.to_vec();
                w.swap(i, j);
                out.push(w);
            }
        }
        out
    }

    pub(crate) fn distance(&self, a: &[usize], b: &[usize]) -> u64 {
        // sigma[i] = position in `a` of the item at position i of `b`.
        let mut pos_in_a = vec![0usize; a.len()];
        for (i, &item) in a.iter().enumerate() {
            if let Some(slot) = pos_in_a.get_mut(item) {
                *slot = i;
            }
        }
        let sigma: Vec<usize> = b
            .iter()
            .map(|&item| pos_in_a.get(item).copied().unwrap_or(0))
            .collect();
        let mut visited = vec![false; sigma.len()];
        let mut cycles = 0u64;
        for start in 0..sigma.len() {
            if visited[start] {
                continue;
            }
            cycles += 1;
            let mut i = start;
            while let Some(seen) = visited.get_mut(i) {
                if *seen {
                    break;
                }
                *seen = true;
                i = sigma.get(i).copied().unwrap_or(usize::MAX);
            }
        }
        sigma.len() as u64 - cycles
    }

    pub(crate) fn ball(&self, v: &[usize], radius: u32) -> Vec<(Vec<usize>, u32)> {
        bfs_ball(v.to_vec(), radius, |w| self.neighbors(w))
    }

    /// The position of each item.
    pub(crate) fn features(&self, v: &[usize], out: &mut Vec<f64>) {
        let mut pos = vec![0.0; self.n];
        for (i, &item) in v.iter().enumerate() {
            if let Some(slot) = pos.get_mut(item) {
                *slot = i as f64;
            }
        }
        out.extend(pos);
    }

    pub(crate) fn feature_names(&self, name: &str, out: &mut Vec<String>) {
        out.extend((0..self.n).map(|item| format!("{name}.pos[{item}]")));
    }
}

/// Advances `v` to the next permutation in lexicographic order; false after the last.
fn next_permutation(v: &mut [usize]) -> bool {
    let Some(i) = (1..v.len()).rev().find(|&i| v[i - 1] < v[i]) else {
        return false;
    };
    let pivot = i - 1;
    let Some(j) = (i..v.len()).rev().find(|&j| v[j] > v[pivot]) else {
        return false;
    };
    v.swap(pivot, j);
    v[i..].reverse();
    true
}
