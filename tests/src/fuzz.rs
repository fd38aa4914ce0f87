//! Fuzzing on the stable toolchain: what the harnesses share.
//!
//! cargo-fuzz needs nightly, which these machines cannot install, so each
//! target is a proptest property ("no panic on any input", plus a
//! round-trip where one exists) fed three ways: every file of its corpus
//! in `fuzz/corpus/<target>/` (replayed by every test run, so a crasher
//! found once stays fixed), random bytes, and random edits of valid
//! encodings (most random bytes die at the first length or CRC check; an
//! edited valid input gets past them to the decoders behind).
//!
//! The random part runs `KMIRROR_FUZZ_CASES` cases per property (default
//! [`DEFAULT_CASES`], so `scripts/test` stays fast); a longer hunt is the
//! same test with a bigger number. proptest shrinks a failure and prints
//! the input; saved into the corpus with [`save`] it becomes a regression.

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;

/// The variable that sets the number of random cases per property.
pub const CASES_VAR: &str = "KMIRROR_FUZZ_CASES";

/// Random cases per property when [`CASES_VAR`] is unset: the whole fuzz
/// step stays well under two minutes on two cores.
pub const DEFAULT_CASES: u32 = 256;

/// The random cases per property: [`CASES_VAR`], else [`DEFAULT_CASES`].
pub fn cases() -> u32 {
    match std::env::var(CASES_VAR) {
        Err(_) => DEFAULT_CASES,
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{CASES_VAR}={v:?} is not a number of cases")),
    }
}

/// proptest's configuration for a fuzz property: [`cases`] cases, and no
/// `.proptest-regressions` files (the corpus is where regressions live).
pub fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Where a target's corpus lives in the repository.
pub fn corpus_dir(target: &str) -> PathBuf {
    crate::repo_root().join("fuzz").join("corpus").join(target)
}

/// Every input of a target's corpus, by file name, in name order. Panics if
/// the corpus is missing or empty: a corpus that vanished must not pass.
pub fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fuzz corpus {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (name, bytes)
        })
        .collect();
    assert!(!inputs.is_empty(), "fuzz corpus {} is empty", dir.display());
    inputs.sort();
    inputs
}

/// Runs `check` on every corpus input of `target`; a panic names the file.
/// Returns how many inputs ran.
pub fn replay(target: &str, check: impl Fn(&[u8])) -> usize {
    let inputs = corpus(target);
    for (name, bytes) in &inputs {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(bytes)));
        if run.is_err() {
            panic!("fuzz/corpus/{target}/{name} panics (see above)");
        }
    }
    eprintln!("fuzz {target}: {} corpus inputs replayed", inputs.len());
    inputs.len()
}

/// Writes an input into a target's corpus (the regeneration test and a
/// found crasher use it); the name says what the input is.
pub fn save(target: &str, name: &str, bytes: &[u8]) {
    let dir = corpus_dir(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// One edit of a byte string. Positions are [`Index`]es, so one edit means
/// something for any length.
#[derive(Debug, Clone)]
pub enum Edit {
    /// Flip one bit.
    Flip(Index, u8),
    /// Overwrite one byte.
    Set(Index, u8),
    /// Insert bytes.
    Insert(Index, Vec<u8>),
    /// Remove up to this many bytes.
    Remove(Index, u8),
    /// Cut everything from here on.
    Truncate(Index),
    /// Overwrite 1, 2, 4 or 8 bytes with a value decoders trip over
    /// (0, -1, the signed extremes, 0x80…), in either byte order.
    Interesting(Index, u8, u8),
    /// Repeat a slice (a duplicated record, a doubled length).
    Duplicate(Index, u8),
}

/// Values that sit on the edges of length and count checks.
const INTERESTING: [i64; 10] = [
    0,
    -1,
    1,
    0x7f,
    0x80,
    0xff,
    i32::MAX as i64,
    i32::MIN as i64,
    i64::MAX,
    i64::MIN,
];

/// A few edits (1 to 8).
pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16)).prop_map(|(i, b)| Edit::Insert(i, b)),
        1 => (any::<Index>(), 1u8..32).prop_map(|(i, n)| Edit::Remove(i, n)),
        1 => any::<Index>().prop_map(Edit::Truncate),
        3 => (any::<Index>(), 0u8..8, any::<u8>()).prop_map(|(i, w, v)| Edit::Interesting(i, w, v)),
        1 => (any::<Index>(), 1u8..64).prop_map(|(i, n)| Edit::Duplicate(i, n)),
    ];
    prop::collection::vec(edit, 1..8)
}

/// `seed` with `edits` applied in order.
pub fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for edit in edits {
        let at = |i: &Index, b: &Vec<u8>| if b.is_empty() { 0 } else { i.index(b.len()) };
        match edit {
            Edit::Flip(i, bit) if !b.is_empty() => {
                let p = at(i, &b);
                b[p] ^= 1 << bit;
            }
            Edit::Set(i, v) if !b.is_empty() => {
                let p = at(i, &b);
                b[p] = *v;
            }
            Edit::Insert(i, bytes) => {
                let p = at(i, &b);
                b.splice(p..p, bytes.iter().copied());
            }
            Edit::Remove(i, n) if !b.is_empty() => {
                let p = at(i, &b);
                let end = (p + *n as usize).min(b.len());
                b.drain(p..end);
            }
            Edit::Truncate(i) => {
                let p = at(i, &b);
                b.truncate(p);
            }
            Edit::Interesting(i, which, v) if !b.is_empty() => {
                let width = [1usize, 2, 4, 8][(*which as usize) % 4];
                let value = INTERESTING[*v as usize % INTERESTING.len()];
                let bytes = if which & 4 == 0 {
                    value.to_be_bytes()
                } else {
                    value.to_le_bytes()
                };
                let src = if which & 4 == 0 {
                    &bytes[8 - width..]
                } else {
                    &bytes[..width]
                };
                let p = at(i, &b);
                let end = (p + width).min(b.len());
                b[p..end].copy_from_slice(&src[..end - p]);
            }
            Edit::Duplicate(i, n) if !b.is_empty() => {
                let p = at(i, &b);
                let end = (p + *n as usize).min(b.len());
                let copy = b[p..end].to_vec();
                b.splice(end..end, copy);
            }
            _ => {}
        }
    }
    b
}
