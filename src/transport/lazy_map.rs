//! [`LazyMap`]: a map that costs one pointer until it holds something. A [`Connection`]
//! (`transport/mod.rs`) keeps several maps that most sockets never use (cluster relays,
//! client-hosted agents, server → client invokes); as plain `HashMap`s they were 48 bytes
//! each in every socket's state. This one allocates on its first insert and gives its memory
//! back when it empties. It offers the part of `HashMap`'s interface the connection uses.
//!
//! [`Connection`]: super::Connection

use std::borrow::Borrow;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::Hash;

/// A `HashMap` allocated on first use and freed when emptied. Boxed on purpose: the map's own
/// 48 bytes (table header and hasher keys) are what an unused map must not cost.
#[derive(Debug)]
#[allow(clippy::box_collection)]
pub struct LazyMap<K, V>(Option<Box<HashMap<K, V>>>);

impl<K, V> Default for LazyMap<K, V> {
    fn default() -> Self {
        LazyMap(None)
    }
}

impl<K: Eq + Hash, V> LazyMap<K, V> {
    /// The map, allocated if it was not.
    fn map_mut(&mut self) -> &mut HashMap<K, V> {
        self.0.get_or_insert_with(Default::default)
    }

    /// Frees the map once it is empty.
    fn shrink(&mut self) {
        if self.0.as_ref().is_some_and(|m| m.is_empty()) {
            self.0 = None;
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is there.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.as_ref().is_some_and(|m| m.contains_key(key))
    }

    /// The value at `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.as_ref()?.get(key)
    }

    /// The value at `key`, to change it.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.as_mut()?.get_mut(key)
    }

    /// Puts `value` at `key`; the value it replaces.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.map_mut().insert(key, value)
    }

    /// The entry of `key` (allocates the map; an entry left vacant is freed by the next
    /// removal that empties it).
    pub fn entry(&mut self, key: K) -> Entry<'_, K, V> {
        self.map_mut().entry(key)
    }

    /// Takes the value at `key` out.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = self.0.as_mut()?.remove(key);
        self.shrink();
        removed
    }

    /// Keeps only the entries `keep` says yes to.
    pub fn retain(&mut self, keep: impl FnMut(&K, &mut V) -> bool) {
        if let Some(m) = self.0.as_mut() {
            m.retain(keep);
        }
        self.shrink();
    }

    /// Every key.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().flat_map(|m| m.keys())
    }

    /// Every value.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().flat_map(|m| m.values())
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().flat_map(|m| m.iter())
    }

    /// Takes every entry out (the map is freed).
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> {
        self.0.take().into_iter().flat_map(|m| m.into_iter())
    }
}

#[cfg(test)]
mod tests {
    use super::LazyMap;

    #[test]
    fn allocates_on_first_insert_and_frees_when_emptied() {
        let mut map: LazyMap<String, u32> = LazyMap::default();
        assert!(map.is_empty() && map.0.is_none());
        assert_eq!(map.get("a"), None);
        assert_eq!(map.remove("a"), None);
        map.insert("a".into(), 1);
        map.insert("b".into(), 2);
        *map.get_mut("b").expect("there") += 1;
        assert_eq!((map.len(), map.get("b")), (2, Some(&3)));
        assert!(map.contains_key("a"));
        assert_eq!(map.remove("a"), Some(1));
        assert!(map.0.is_some(), "one entry left");
        map.retain(|_, v| *v != 3);
        assert!(map.0.is_none(), "emptied by retain: freed");
        *map.entry("c".into()).or_default() += 5;
        let mut all: Vec<_> = map.drain().collect();
        all.sort();
        assert_eq!(all, [("c".to_string(), 5)]);
        assert!(map.0.is_none(), "drained: freed");
        assert_eq!(
            std::mem::size_of::<LazyMap<String, u32>>(),
            std::mem::size_of::<usize>()
        );
    }
}
