//! The lz4 frame of a Kafka batch payload, read and written with lz4's
//! block functions straight between the batch bytes and one output buffer.
//!
//! Why not the lz4 crate's frame `Decoder`/`Encoder`: on the merge path
//! (every record of a merged batch is decompressed and compressed again)
//! they were a third of the daemon's CPU in a profile of the copy: the
//! decoder copies the input into its own buffer and hands out at most
//! what the caller's reader asks for (8 KiB through `io::copy`, into a
//! growing buffer), and the encoder wrote a xxHash-32 per block nobody
//! reads. Here a block is decompressed once, into its place in the output,
//! and compressed once, into its place in the frame.
//!
//! Only the frame Kafka's own producer writes (`KafkaLZ4BlockOutputStream`:
//! independent blocks, no checksums, no dictionary) is read here; any other
//! frame — linked blocks, checksums, several frames — is `None`, and the
//! caller falls back to the lz4 library, which reads them all.

use bytes::{BufMut, BytesMut};

const MAGIC: u32 = 0x184D_2204;
/// Version 01, independent blocks, no checksums, no content size.
const FLG: u8 = 0x60;
const FLG_CONTENT_SIZE: u8 = 0x08;
/// 64 KiB blocks, as Kafka's producer writes them.
const BD_64K: u8 = 0x40;
const BLOCK: usize = 64 * 1024;
/// A block stored as it is (its size field's high bit).
const UNCOMPRESSED: u32 = 0x8000_0000;

/// Whether compressing pays: a merged batch whose sources' payloads were
/// at least this share of their records (lz4 found almost nothing to take
/// out, as with random data) is written with stored blocks — still an lz4
/// frame, the codec kept — instead of being compressed again for nothing.
pub(super) fn worth_compressing(compressed: usize, plain: usize) -> bool {
    // Compressed to less than 31/32 (about 97 %) of the plain size.
    compressed.saturating_mul(32) < plain.saturating_mul(31)
}

/// xxHash-32 (seed 0) of a frame descriptor (at most 11 bytes): the header
/// checksum is its second byte.
fn xxh32_short(data: &[u8]) -> u32 {
    const P1: u32 = 2_654_435_761;
    const P2: u32 = 2_246_822_519;
    const P3: u32 = 3_266_489_917;
    const P4: u32 = 668_265_263;
    const P5: u32 = 374_761_393;
    debug_assert!(data.len() < 16);
    let mut h = P5.wrapping_add(data.len() as u32);
    let mut words = data.chunks_exact(4);
    for w in words.by_ref() {
        let lane = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        h = h
            .wrapping_add(lane.wrapping_mul(P3))
            .rotate_left(17)
            .wrapping_mul(P4);
    }
    for &b in words.remainder() {
        h = h
            .wrapping_add(u32::from(b).wrapping_mul(P5))
            .rotate_left(11)
            .wrapping_mul(P1);
    }
    h ^= h >> 15;
    h = h.wrapping_mul(P2);
    h ^= h >> 13;
    h = h.wrapping_mul(P3);
    h ^ (h >> 16)
}

/// Room for what a compressed block of `len` bytes can hold: lz4 turns a
/// byte into at most 255 (a run of 255s lengthens a match by 255 each),
/// so a damaged or hostile frame of many tiny blocks cannot make us zero
/// the largest block size for each. A block that holds more fails to
/// decompress here and goes to the library.
fn room_for(len: usize, max_block: usize) -> usize {
    len.saturating_mul(255).saturating_add(64).min(max_block)
}

fn header_checksum(descriptor: &[u8]) -> u8 {
    (xxh32_short(descriptor) >> 8) as u8
}

/// Appends the frame of `plain` to `out`: 64 KiB independent blocks, each
/// compressed at lz4's default (fast) level, or stored where compressing
/// does not shrink it or `compress` is false.
pub(super) fn encode(plain: &[u8], compress: bool, out: &mut BytesMut) -> std::io::Result<()> {
    out.reserve(7 + plain.len() + plain.len() / BLOCK * 4 + 8);
    out.put_u32_le(MAGIC);
    out.put_u8(FLG);
    out.put_u8(BD_64K);
    out.put_u8(header_checksum(&[FLG, BD_64K]));
    for chunk in plain.chunks(BLOCK) {
        let at = out.len();
        if compress {
            let bound = lz4::block::compress_bound(chunk.len())?;
            out.resize(at + 4 + bound, 0);
            let n = lz4::block::compress_to_buffer(
                chunk,
                Some(lz4::block::CompressionMode::DEFAULT),
                false,
                &mut out[at + 4..],
            )?;
            if n < chunk.len() {
                out[at..at + 4].copy_from_slice(&(n as u32).to_le_bytes());
                out.truncate(at + 4 + n);
                continue;
            }
            out.truncate(at);
        }
        out.put_u32_le(chunk.len() as u32 | UNCOMPRESSED);
        out.put_slice(chunk);
    }
    out.put_u32_le(0);
    Ok(())
}

/// Decompresses a frame as Kafka's producer writes it into a new buffer;
/// `None` for anything else (see the module doc) or damaged data, which
/// the caller hands to the lz4 library to read or to report.
pub(super) fn decode(frame: &[u8]) -> Option<Vec<u8>> {
    let magic = u32::from_le_bytes(frame.get(..4)?.try_into().ok()?);
    let (flg, bd) = (*frame.get(4)?, *frame.get(5)?);
    if magic != MAGIC || flg & !FLG_CONTENT_SIZE != FLG || bd & 0x8F != 0 {
        return None;
    }
    let max_block = match bd >> 4 {
        4 => 64 << 10,
        5 => 256 << 10,
        6 => 1 << 20,
        7 => 4 << 20,
        _ => return None,
    };
    let descriptor_end = if flg & FLG_CONTENT_SIZE != 0 { 14 } else { 6 };
    let descriptor = frame.get(4..descriptor_end)?;
    if *frame.get(descriptor_end)? != header_checksum(descriptor) {
        return None;
    }
    // First the block sizes, so the output is allocated once.
    let blocks = descriptor_end + 1;
    let (mut at, mut room) = (blocks, 0usize);
    loop {
        let size = u32::from_le_bytes(frame.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if size == 0 {
            break;
        }
        let len = (size & !UNCOMPRESSED) as usize;
        if len > max_block {
            return None;
        }
        room += if size & UNCOMPRESSED != 0 {
            len
        } else {
            room_for(len, max_block)
        };
        at = at.checked_add(len).filter(|&end| end <= frame.len())?;
    }
    if at != frame.len() {
        return None;
    }
    let mut out = Vec::with_capacity(room);
    let mut at = blocks;
    loop {
        let size = u32::from_le_bytes(frame[at..at + 4].try_into().ok()?);
        at += 4;
        if size == 0 {
            return Some(out);
        }
        let len = (size & !UNCOMPRESSED) as usize;
        let block = &frame[at..at + len];
        at += len;
        if size & UNCOMPRESSED != 0 {
            out.extend_from_slice(block);
        } else {
            let (start, room) = (out.len(), room_for(len, max_block));
            out.resize(start + room, 0);
            let n = lz4::block::decompress_to_buffer(block, Some(room as i32), &mut out[start..])
                .ok()?;
            out.truncate(start + n);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// Compressible and incompressible stretches, several blocks long.
    fn sample(len: usize) -> Vec<u8> {
        let mut x: u32 = 0x1234_5678;
        (0..len)
            .map(|i| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                if (i / 5000) % 2 == 0 {
                    b'a' + (i % 7) as u8
                } else {
                    b'A' + (x >> 24) as u8 % 26
                }
            })
            .collect()
    }

    fn library_frame(plain: &[u8], size: lz4::BlockSize, content_size: bool) -> Vec<u8> {
        let mut builder = lz4::EncoderBuilder::new();
        builder
            .block_size(size)
            .block_mode(lz4::BlockMode::Independent)
            .block_checksum(lz4::liblz4::BlockChecksum::NoBlockChecksum)
            .checksum(lz4::ContentChecksum::NoChecksum);
        if content_size {
            builder.content_size(plain.len() as u64);
        }
        let mut e = builder.build(Vec::new()).unwrap();
        e.write_all(plain).unwrap();
        let (frame, r) = e.finish();
        r.unwrap();
        frame
    }

    fn library_decode(frame: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        lz4::Decoder::new(frame)
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn the_frame_written_is_the_lz4_librarys_byte_for_byte() {
        for len in [0, 1, 100, BLOCK, BLOCK + 1, 300_000] {
            let plain = sample(len);
            let mut ours = BytesMut::new();
            encode(&plain, true, &mut ours).unwrap();
            assert_eq!(
                &ours[..],
                &library_frame(&plain, lz4::BlockSize::Max64KB, false)[..],
                "{len} bytes"
            );
            let mut stored = BytesMut::new();
            encode(&plain, false, &mut stored).unwrap();
            assert_eq!(library_decode(&stored), plain, "stored, {len} bytes");
            assert!(stored.len() >= plain.len());
        }
    }

    #[test]
    fn kafkas_frames_decode_as_the_library_decodes_them_and_others_are_left_to_it() {
        let plain = sample(700_000);
        for size in [
            lz4::BlockSize::Max64KB,
            lz4::BlockSize::Max256KB,
            lz4::BlockSize::Max1MB,
            lz4::BlockSize::Max4MB,
        ] {
            for content_size in [false, true] {
                let frame = library_frame(&plain, size.clone(), content_size);
                assert_eq!(decode(&frame).as_deref(), Some(&plain[..]), "{size:?}");
            }
        }
        let mut stored = BytesMut::new();
        encode(&plain, false, &mut stored).unwrap();
        assert_eq!(decode(&stored).as_deref(), Some(&plain[..]));
        // A frame head Kafka's producer writes (FLG 0x60, BD 0x40, HC 0x82).
        assert_eq!(&stored[4..7], &[0x60, 0x40, 0x82]);

        // Checksums, linked blocks: the library's.
        let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        e.write_all(&plain).unwrap();
        let checked = e.finish().0;
        assert_eq!(decode(&checked), None);
        assert_eq!(library_decode(&checked), plain);
        // Damage: a wrong header checksum, a cut block, bytes after the end.
        let good = library_frame(&plain, lz4::BlockSize::Max64KB, false);
        let mut bad = good.clone();
        bad[6] ^= 1;
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&good[..good.len() - 9]), None);
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(decode(&trailing), None);
        let mut corrupt = good;
        corrupt[20] ^= 0xFF;
        let _ = decode(&corrupt); // whatever it says, no panic
    }

    #[test]
    fn compressing_pays_below_97_percent() {
        assert!(worth_compressing(50, 100));
        assert!(worth_compressing(96, 100));
        assert!(!worth_compressing(98, 100));
        assert!(!worth_compressing(65_404, 65_536));
        assert!(!worth_compressing(0, 0));
    }
}
