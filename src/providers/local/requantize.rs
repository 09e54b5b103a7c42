//! The model file the candle engine runs: a 4- or 5-bit GGUF file's matrices requantized to
//! 8 bits (Q8_0) once, kept beside the original (`<name>.ferroclaw-q8_0.gguf`), and read
//! from there on every later load.
//!
//! candle's 8-bit products are the fastest it has on the CPU (measured on SmolLM2-135M, 2
//! threads: 70 tokens/s against 52 for Q4_1, and a prompt read in half the time), at 1.7×
//! the memory of a 4-bit file (135 M parameters: 143 MB). Requantizing takes about a second,
//! so it is done once; a folder that cannot be written runs the original file. Knows files
//! and tensor types; not the forward pass.

use candle_core::Device;
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use std::path::{Path, PathBuf};

/// Where the 8-bit copy of `original` lives.
fn copy_path(original: &Path) -> PathBuf {
    let name = original
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    original.with_file_name(format!("{name}.ferroclaw-q8_0.gguf"))
}

/// Whether a tensor is one of the matrices worth requantizing (2-D, low-bit, rows in
/// 32-value blocks).
fn requantizes(info: &gguf_file::TensorInfo) -> bool {
    use GgmlDType::*;
    let dims = info.shape.dims();
    dims.len() == 2
        && dims[1].is_multiple_of(32)
        && matches!(
            info.ggml_dtype,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q4K | Q5K | Q2K | Q3K
        )
}

/// A GGUF file opened for reading, its header read (buffered: the header is a hundred
/// thousand small reads, the vocabulary's strings); the reader is left at the tensors. A
/// file whose lengths do not fit in it is refused first (`gguf_check`): candle would
/// allocate what they say.
pub(super) fn open(
    path: &Path,
) -> Result<(gguf_file::Content, std::io::BufReader<std::fs::File>), String> {
    super::gguf_check::whole(path)?;
    let mut file = std::io::BufReader::with_capacity(
        1 << 20,
        std::fs::File::open(path).map_err(|e| e.to_string())?,
    );
    let content = gguf_file::Content::read(&mut file).map_err(|e| e.to_string())?;
    Ok((content, file))
}

/// A file to load, opened: its path, its header, the reader left at the tensors.
pub(super) type Opened = (
    PathBuf,
    gguf_file::Content,
    std::io::BufReader<std::fs::File>,
);

/// The file to load for `original`, opened (its header checked once): its 8-bit copy (made
/// now when missing or damaged), or `original` itself when nothing in it is worth
/// requantizing or the copy cannot be written.
pub fn open_runnable(original: &Path) -> Result<Opened, String> {
    let copy = copy_path(original);
    if copy.is_file() {
        match open(&copy) {
            Ok((content, file)) => return Ok((copy, content, file)),
            // Made again below (one torn by an older version, a damaged disk).
            Err(why) => {
                tracing::warn!(error = %why, "the 8-bit copy of the local model is damaged; making it again");
                let _ = std::fs::remove_file(&copy);
            }
        }
    }
    let (content, mut file) = open(original)?;
    if !content.tensor_infos.values().any(requantizes) {
        return Ok((original.to_path_buf(), content, file));
    }
    let started = std::time::Instant::now();
    match write_copy(&content, &mut file, &copy) {
        Ok(()) => {
            tracing::info!(file = %copy.display(), ms = started.elapsed().as_millis() as u64, "local model requantized to 8 bits (once)");
            let (content, file) = open(&copy)?;
            Ok((copy, content, file))
        }
        Err(e) => {
            tracing::warn!(error = %e, "the 8-bit copy of the local model could not be written; running the original (slower)");
            let (content, file) = open(original)?;
            Ok((original.to_path_buf(), content, file))
        }
    }
}

fn write_copy(
    content: &gguf_file::Content,
    file: &mut std::io::BufReader<std::fs::File>,
    copy: &Path,
) -> Result<(), String> {
    let failed = |e: candle_core::Error| e.to_string();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(&str, QTensor)> = Vec::with_capacity(names.len());
    for name in names {
        let info = &content.tensor_infos[name];
        let tensor = content.tensor(file, name, &Device::Cpu).map_err(failed)?;
        let tensor = if requantizes(info) {
            let values = tensor.dequantize(&Device::Cpu).map_err(failed)?;
            QTensor::quantize(&values, GgmlDType::Q8_0).map_err(failed)?
        } else {
            tensor
        };
        tensors.push((name.as_str(), tensor));
    }
    let metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    // Written aside under a name of its own and renamed: a load never sees half a file,
    // even while another process makes the same copy (a shared scratch name let one
    // writer's rename publish a file the other was still rewriting; its reader died
    // allocating a string length read from the half-written header).
    crate::models::replace_file(copy, "partial", |file| {
        let mut out = std::io::BufWriter::new(file);
        gguf_file::write(&mut out, &metadata, &tensors)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        std::io::Write::flush(&mut out)
    })
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::{copy_path, open_runnable};
    use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
    use candle_core::{Device, Tensor};
    use std::path::Path;

    /// A GGUF file of one 4-bit matrix large enough that requantizing it takes a while.
    fn four_bit_file(path: &Path) {
        let (rows, cols) = (2048usize, 2048usize);
        let values = Tensor::arange(0f32, (rows * cols) as f32, &Device::Cpu)
            .unwrap()
            .reshape((rows, cols))
            .unwrap()
            .affine(1e-6, -2.0)
            .unwrap();
        let matrix = QTensor::quantize(&values, GgmlDType::Q4_0).unwrap();
        let name = gguf_file::Value::String("test".into());
        let mut out = std::fs::File::create(path).unwrap();
        gguf_file::write(
            &mut out,
            &[("general.name", &name)],
            &[("blk.0.ffn_up.weight", &matrix)],
        )
        .unwrap();
    }

    #[test]
    fn first_uses_at_once_each_read_a_whole_copy_and_leave_no_scratch_file() {
        let dir = tempfile::tempdir().unwrap();
        let original = dir.path().join("m.Q4_0.gguf");
        four_bit_file(&original);
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    start.wait();
                    // Read at once, as a load does, while other first uses may still write.
                    let (path, content, mut file) = open_runnable(&original).unwrap();
                    assert_eq!(path, copy_path(&original), "the 8-bit copy is run");
                    let info = &content.tensor_infos["blk.0.ffn_up.weight"];
                    assert_eq!(info.ggml_dtype, GgmlDType::Q8_0);
                    let matrix = content
                        .tensor(&mut file, "blk.0.ffn_up.weight", &Device::Cpu)
                        .unwrap();
                    assert_eq!(matrix.shape().dims(), [2048, 2048]);
                });
            }
        });
        // A damaged copy (torn by an older version) is made again, not loaded.
        let copy = copy_path(&original);
        let whole_copy = std::fs::read(&copy).unwrap();
        std::fs::write(&copy, &whole_copy[..whole_copy.len() / 3]).unwrap();
        assert_eq!(open_runnable(&original).unwrap().0, copy);
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            whole_copy,
            "made again, whole"
        );
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["m.Q4_0.ferroclaw-q8_0.gguf", "m.Q4_0.gguf"]);
    }

    #[test]
    fn the_copy_sits_beside_the_original() {
        assert_eq!(
            copy_path(Path::new("/m/SmolLM2-135M-Instruct.Q4_1.gguf")),
            Path::new("/m/SmolLM2-135M-Instruct.Q4_1.ferroclaw-q8_0.gguf")
        );
    }
}
