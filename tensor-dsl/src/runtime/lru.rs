//! A bounded map for per-process memos of compiled code: at most `cap` entries, the least
//! recently used one evicted first. Evicting drops the memo's reference only; a caller still
//! holding the value keeps it alive.
//!
//! ```
//! use tensor_dsl::runtime::lru::Lru;
//! let mut m = Lru::new(2);
//! m.get_or_insert_with("a".to_string(), || 1);
//! m.get_or_insert_with("b".to_string(), || 2);
//! m.get_or_insert_with("a".to_string(), || 0); // a is used again
//! m.get_or_insert_with("c".to_string(), || 3); // evicts b, the least recently used
//! assert_eq!(m.len(), 2);
//! assert_eq!(*m.get_or_insert_with("b".to_string(), || 4), 4);
//! ```

use std::collections::HashMap;
use std::hash::Hash;

/// A map of at most `cap` entries with least-recently-used eviction.
#[derive(Debug)]
pub struct Lru<K, V> {
    cap: usize,
    clock: u64,
    map: HashMap<K, (u64, V)>,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map holding at most `cap` (at least 1) entries.
    pub fn new(cap: usize) -> Self {
        Lru {
            cap: cap.max(1),
            clock: 0,
            map: HashMap::new(),
        }
    }

    /// The value for `key`, made by `make` (evicting the least recently used entry when
    /// full) if it is not there; either way `key` becomes the most recently used.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        self.clock += 1;
        let now = self.clock;
        if !self.map.contains_key(&key) && self.map.len() >= self.cap {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.map.remove(&k);
            }
        }
        let entry = self.map.entry(key).or_insert_with(|| (now, make()));
        entry.0 = now;
        &mut entry.1
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
