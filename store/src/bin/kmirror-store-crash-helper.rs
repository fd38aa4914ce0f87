//! Test helper for the SIGKILL crash test: appends batches to a log in a
//! loop and prints `ack <base> <count>` after each append returns, so the
//! test knows exactly which batches were acknowledged before the kill.

use std::io::Write;

use kmirror_events::{MirrorPartitionKey, OffsetMapRun, OffsetMapRunKey, Record, TopicId};
use kmirror_store::{EventLog, SledLog};

fn main() {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: kmirror-store-crash-helper DIR");
    let log = SledLog::open(&dir).expect("open log");
    let mut stdout = std::io::stdout().lock();
    let mut n: u64 = log.end_offset();
    loop {
        let count = 1 + (n % 7) as usize;
        let batch: Vec<Record> = (0..count as u64)
            .map(|i| {
                let s = (n + i) as i64;
                Record::OffsetMapRun(
                    OffsetMapRunKey {
                        partition: MirrorPartitionKey::new(
                            "crash",
                            TopicId([7; 16]),
                            (s % 3) as i32,
                        ),
                        source_start: s,
                    },
                    Some(OffsetMapRun {
                        source_start: s,
                        destination_start: s,
                        length: 1,
                    }),
                )
            })
            .collect();
        let base = log.append(n as i64, &batch).expect("append");
        writeln!(stdout, "ack {base} {count}").expect("stdout");
        stdout.flush().expect("flush");
        n = base + count as u64;
    }
}
