//! Decoding the image's persistent maps without trusting their lengths.
//!
//! imbl's `Deserialize` preallocates as many entries as the input claims
//! (the serde size hint, which bincode takes straight from the bytes), so
//! a damaged snapshot claiming 2^36 entries aborted the process on
//! allocation — found by the fuzzer, `fuzz/corpus/event_codec/crash-*`.
//! These decode through std's `BTreeMap`, whose `Deserialize` caps what it
//! preallocates, and build the persistent map from it: the bytes on the
//! wire are the same (a serde map either way).

use std::collections::BTreeMap;
use std::hash::Hash;

use imbl::{HashMap, OrdMap};
use serde::{Deserialize, Deserializer};

/// `#[serde(deserialize_with)]` for an [`OrdMap`].
pub fn ord_map<'de, D, K, V>(d: D) -> Result<OrdMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord + Clone,
    V: Deserialize<'de> + Clone,
{
    Ok(BTreeMap::<K, V>::deserialize(d)?.into_iter().collect())
}

/// `#[serde(deserialize_with)]` for a [`HashMap`].
pub fn hash_map<'de, D, K, V>(d: D) -> Result<HashMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord + Hash + Clone,
    V: Deserialize<'de> + Clone,
{
    Ok(BTreeMap::<K, V>::deserialize(d)?.into_iter().collect())
}

/// `#[serde(deserialize_with)]` for a [`HashMap`] of [`OrdMap`]s.
pub fn hash_map_of_ord_maps<'de, D, K, I, V>(d: D) -> Result<HashMap<K, OrdMap<I, V>>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord + Hash + Clone,
    I: Deserialize<'de> + Ord + Clone,
    V: Deserialize<'de> + Clone,
{
    Ok(BTreeMap::<K, BTreeMap<I, V>>::deserialize(d)?
        .into_iter()
        .map(|(k, inner)| (k, inner.into_iter().collect()))
        .collect())
}
