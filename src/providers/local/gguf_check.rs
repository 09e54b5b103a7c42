//! A GGUF file's header walked with every length checked against the file's size, before
//! candle reads it. candle allocates whatever a length field says (a string's, an array's,
//! a tensor's data) before reading that many bytes: a torn or damaged file once asked for
//! 256 TB and the allocation failure aborted the process. Knows the GGUF layout (versions
//! 1–3); builds nothing from it.

use candle_core::quantized::GgmlDType;
use std::io::{BufReader, Read};
use std::path::Path;

/// Dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;
/// Array nesting followed before the file is called damaged.
const MAX_NESTING: usize = 8;
/// Where tensor data starts when the file names no alignment (GGUF's default).
const DEFAULT_ALIGNMENT: u64 = 32;

/// Ok when every length in `path`'s header, and every tensor's data, lies within the file.
pub fn whole(path: &Path) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let mut walk = Walk {
        reader: BufReader::with_capacity(1 << 16, file),
        at: 0,
        size,
        wide: true,
    };
    walk.header()
        .map_err(|why| format!("{} is damaged: {why}", path.display()))
}

struct Walk {
    reader: BufReader<std::fs::File>,
    /// Bytes read or skipped so far.
    at: u64,
    size: u64,
    /// Version 2 and later: lengths and counts are 64-bit.
    wide: bool,
}

impl Walk {
    fn header(&mut self) -> Result<(), String> {
        if self.bytes::<4>()? != *b"GGUF" {
            return Err("not a GGUF file".into());
        }
        self.wide = match self.u32()? {
            1 => false,
            2 | 3 => true,
            v => return Err(format!("unknown GGUF version {v}")),
        };
        let tensors = self.count()?;
        let entries = self.count()?;
        let mut alignment = DEFAULT_ALIGNMENT;
        for _ in 0..entries {
            let key = self.string()?;
            let kind = self.u32()?;
            if key == "general.alignment" && matches!(kind, 0 | 2 | 4) {
                alignment = match kind {
                    0 => u64::from(self.bytes::<1>()?[0]),
                    2 => u64::from(u16::from_le_bytes(self.bytes::<2>()?)),
                    _ => u64::from(self.u32()?),
                };
                if alignment == 0 || !alignment.is_power_of_two() {
                    return Err(format!("alignment {alignment}"));
                }
            } else {
                self.value(kind, 0)?;
            }
        }
        let mut extents = Vec::new();
        for _ in 0..tensors {
            self.skip_string()?;
            let dims = self.u32()?;
            if dims > MAX_DIMS {
                return Err(format!("a tensor of {dims} dimensions"));
            }
            let mut elements: u64 = 1;
            for _ in 0..dims {
                let dim = self.count()?;
                elements = elements
                    .checked_mul(dim)
                    .ok_or("a tensor's element count overflows")?;
            }
            let (block, bytes) = block_and_bytes(self.u32()?)?;
            if !elements.is_multiple_of(block) {
                return Err(format!("{elements} elements in blocks of {block}"));
            }
            let offset = self.u64()?;
            let length = (elements / block)
                .checked_mul(bytes)
                .ok_or("a tensor's size overflows")?;
            extents.push((offset, length));
        }
        let data = self.at.div_ceil(alignment) * alignment;
        for (offset, length) in extents {
            let end = data
                .checked_add(offset)
                .and_then(|start| start.checked_add(length));
            if end.is_none_or(|end| end > self.size) {
                return Err(format!(
                    "a tensor's data ({length} bytes at {offset}) ends past the file's {} bytes",
                    self.size
                ));
            }
        }
        Ok(())
    }

    /// Skip one value of type `kind`.
    fn value(&mut self, kind: u32, depth: usize) -> Result<(), String> {
        match kind {
            8 => self.skip_string(),
            9 => {
                if depth >= MAX_NESTING {
                    return Err("arrays nested too deep".into());
                }
                let inner = self.u32()?;
                let count = self.count()?;
                match fixed_size(inner) {
                    Some(size) => self.skip(count.checked_mul(size).ok_or("array size overflows")?),
                    None => {
                        // Each element takes at least 4 bytes (a type or a length).
                        if count > (self.size - self.at) / 4 {
                            return Err(format!("an array of {count} elements"));
                        }
                        (0..count).try_for_each(|_| self.value(inner, depth + 1))
                    }
                }
            }
            _ => self.skip(fixed_size(kind).ok_or(format!("unknown value type {kind}"))?),
        }
    }

    /// A string's bytes (its length checked first).
    fn string(&mut self) -> Result<String, String> {
        let length = self.count()?;
        self.within(length)?;
        let mut text = vec![0; length as usize];
        self.reader.read_exact(&mut text).map_err(truncated)?;
        self.at += length;
        Ok(String::from_utf8_lossy(&text).into_owned())
    }

    /// Past a string (its length checked first), unread: the vocabulary's tens of thousands
    /// of strings are only measured.
    fn skip_string(&mut self) -> Result<(), String> {
        let length = self.count()?;
        self.skip(length)
    }

    /// A length or count: 32-bit in version 1, 64-bit after.
    fn count(&mut self) -> Result<u64, String> {
        if self.wide {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.bytes::<4>().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        self.bytes::<8>().map(u64::from_le_bytes)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut buf = [0; N];
        self.reader.read_exact(&mut buf).map_err(truncated)?;
        self.at += N as u64;
        Ok(buf)
    }

    fn skip(&mut self, length: u64) -> Result<(), String> {
        self.within(length)?;
        let step = i64::try_from(length).map_err(|_| "a length past any file")?;
        self.reader.seek_relative(step).map_err(|e| e.to_string())?;
        self.at += length;
        Ok(())
    }

    /// Whether `length` more bytes are in the file.
    fn within(&self, length: u64) -> Result<(), String> {
        if length > self.size - self.at {
            return Err(format!(
                "a length of {length} bytes at byte {} of {}",
                self.at, self.size
            ));
        }
        Ok(())
    }
}

fn truncated(e: std::io::Error) -> String {
    format!("the header ends early ({e})")
}

/// The size of a value of fixed-size type `kind` (None for strings and arrays).
fn fixed_size(kind: u32) -> Option<u64> {
    match kind {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// A tensor type's elements per block and bytes per block (the types candle reads).
fn block_and_bytes(kind: u32) -> Result<(u64, u64), String> {
    use GgmlDType::*;
    let dtype = match kind {
        0 => F32,
        1 => F16,
        2 => Q4_0,
        3 => Q4_1,
        6 => Q5_0,
        7 => Q5_1,
        8 => Q8_0,
        9 => Q8_1,
        10 => Q2K,
        11 => Q3K,
        12 => Q4K,
        13 => Q5K,
        14 => Q6K,
        15 => Q8K,
        30 => BF16,
        _ => return Err(format!("unknown tensor type {kind}")),
    };
    Ok((dtype.block_size() as u64, dtype.type_size() as u64))
}

#[cfg(test)]
mod tests {
    use super::whole;
    use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
    use candle_core::{Device, Tensor};

    /// A small GGUF file as candle writes it: a name, a vocabulary array, one 4-bit matrix.
    fn file(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>) {
        let values = Tensor::arange(0f32, 64.0 * 64.0, &Device::Cpu)
            .unwrap()
            .reshape((64, 64))
            .unwrap();
        let matrix = QTensor::quantize(&values, GgmlDType::Q4_0).unwrap();
        let name = gguf_file::Value::String("test".into());
        let vocabulary = gguf_file::Value::Array(
            ["a", "bb", "ccc"]
                .map(|t| gguf_file::Value::String(t.into()))
                .to_vec(),
        );
        let path = dir.join("m.gguf");
        let mut out = std::fs::File::create(&path).unwrap();
        gguf_file::write(
            &mut out,
            &[
                ("general.name", &name),
                ("tokenizer.ggml.tokens", &vocabulary),
            ],
            &[("w", &matrix)],
        )
        .unwrap();
        drop(out);
        let bytes = std::fs::read(&path).unwrap();
        (path, bytes)
    }

    #[test]
    fn a_whole_file_passes_and_every_cut_of_it_is_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = file(dir.path());
        whole(&path).unwrap();
        for cut in [3, 10, 30, 60, 100, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let why = whole(&path).expect_err(&format!("cut at {cut}"));
            assert!(why.contains("is damaged: "), "{why}");
        }
    }

    #[test]
    fn a_length_past_the_file_is_refused_before_anything_is_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = file(dir.path());
        // The first key's length (after magic, version and both counts): 2^48 bytes, as in
        // the torn copy that aborted a process (candle would allocate it at once).
        let mut damaged = bytes.clone();
        damaged[24..32].copy_from_slice(&(1u64 << 48).to_le_bytes());
        std::fs::write(&path, &damaged).unwrap();
        let why = whole(&path).unwrap_err();
        assert!(why.contains("a length of 281474976710656 bytes"), "{why}");
        // The tensor's first dimension, near the end of the header: its data would end far
        // past the file.
        let mut damaged = bytes.clone();
        // The tensor's info: name (length 1, "w"), dimension count (u32), dimensions.
        let info = bytes
            .windows(9)
            .rposition(|w| w == b"\x01\0\0\0\0\0\0\0w")
            .unwrap();
        let first_dimension = info + 9 + 4;
        damaged[first_dimension..first_dimension + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        std::fs::write(&path, &damaged).unwrap();
        let why = whole(&path).unwrap_err();
        assert!(why.contains("ends past the file"), "{why}");
    }
}
