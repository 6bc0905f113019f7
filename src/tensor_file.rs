//! Named flat tensors in safetensors files, the one format of the fixtures and the
//! checkpoints: little-endian vectors of the element types the state holds ([`Element`]),
//! read back with their dtype checked, and files written atomically ([`write_atomic`]:
//! a temporary file, fsync, rename, fsync of the folder), so an interrupted write leaves
//! the previous file whole.

use crate::error::{Error, Result};
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

/// One flat tensor, ready to serialize.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<usize>,
    pub(crate) bytes: Vec<u8>,
}

impl View for &Tensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// An element type a tensor holds: its dtype and its little-endian bytes.
pub trait Element: Copy {
    const DTYPE: Dtype;
    const SIZE: usize;
    fn put(self, out: &mut Vec<u8>);
    /// From exactly `SIZE` bytes.
    fn get(b: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $dtype:ident) => {
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$dtype;
            const SIZE: usize = std::mem::size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                let mut w = [0u8; std::mem::size_of::<$t>()];
                w.copy_from_slice(b);
                <$t>::from_le_bytes(w)
            }
        }
    };
}
element!(f32, F32);
element!(f64, F64);
element!(u32, U32);
element!(i32, I32);
element!(u64, U64);

/// The flat tensor of `v`.
pub fn tensor<T: Element>(v: &[T]) -> Tensor {
    let mut bytes = Vec::with_capacity(v.len() * T::SIZE);
    for &x in v {
        x.put(&mut bytes);
    }
    Tensor {
        dtype: T::DTYPE,
        shape: vec![v.len()],
        bytes,
    }
}

/// Tensor `name` of `st` as a vector of `T`; `origin` (the file, say) names it in the
/// error, which the caller turns into its own, with its fix.
pub fn read<T: Element>(
    st: &SafeTensors,
    name: &str,
    origin: &str,
) -> std::result::Result<Vec<T>, String> {
    let v = st
        .tensor(name)
        .map_err(|e| format!("{origin}: tensor {name} is missing or unreadable ({e})"))?;
    if v.dtype() != T::DTYPE {
        return Err(format!(
            "{origin}: tensor {name} is {:?}, expected {:?}",
            v.dtype(),
            T::DTYPE
        ));
    }
    Ok(decode(v.data()))
}

/// Little-endian bytes as elements (a trailing partial element is dropped).
pub fn decode<T: Element>(bytes: &[u8]) -> Vec<T> {
    bytes.chunks_exact(T::SIZE).map(T::get).collect()
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |err| Error::Io { what, err }
}

/// Write `bytes` to `path` so that a crash leaves either the old file or the new one: a
/// temporary file beside it, written and fsynced, renamed over it, and the folder fsynced.
/// A write that fails (a full disk) removes its temporary file and leaves the old file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io(format!("creating {}", tmp.display())))?;
    let (first, second) = bytes.split_at(bytes.len() / 2);
    let written = f.write_all(first).and_then(|()| {
        if crash_planted("partial", path) {
            let _ = f.sync_all();
            std::process::abort();
        }
        f.write_all(second)?;
        f.sync_all()
    });
    drop(f);
    if let Err(err) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Io {
            what: format!(
                "writing {} ({} bytes; removed again, and any earlier {} kept)",
                tmp.display(),
                bytes.len(),
                path.display()
            ),
            err,
        });
    }
    if crash_planted("before-rename", path) {
        std::process::abort();
    }
    std::fs::rename(&tmp, path).map_err(io(format!("renaming to {}", path.display())))?;
    if crash_planted("after-rename", path) {
        std::process::abort();
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // A folder opened read-only can be fsynced on Unix, so the rename is durable.
        if let Ok(d) = std::fs::File::open(dir) {
            d.sync_all()
                .map_err(io(format!("flushing the folder {} to disk", dir.display())))?;
        }
    }
    Ok(())
}

/// A crash planted by the tests of interrupted writes (never set in a run):
/// `TALLYHO_CRASH_AT=POINT@NAME` aborts the process at `POINT` of writing a file whose name
/// contains `NAME`: `partial` (half the bytes in the temporary file), `before-rename` (the
/// temporary file whole), `after-rename` (the new file in place, the folder not yet synced).
fn crash_planted(point: &str, path: &Path) -> bool {
    let Some(spec) = std::env::var_os("TALLYHO_CRASH_AT") else {
        return false;
    };
    let spec = spec.to_string_lossy();
    let (at, name) = spec.split_once('@').unwrap_or((&spec, ""));
    at == point
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_type_round_trips_through_a_file() {
        let dir = std::env::temp_dir().join(format!("tallyho-tensor-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.safetensors");
        let (a, b, c, d, e) = (
            vec![1.5f32, -0.0, f32::MAX],
            vec![std::f64::consts::PI],
            vec![7u32, u32::MAX],
            vec![-3i32],
            vec![u64::MAX - 1],
        );
        let named = [
            ("a", tensor(&a)),
            ("b", tensor(&b)),
            ("c", tensor(&c)),
            ("d", tensor(&d)),
            ("e", tensor(&e)),
        ];
        let bytes = safetensors::serialize(named.iter().map(|(n, t)| (*n, t)), &None).unwrap();
        write_atomic(&path, &bytes).unwrap();
        let back = std::fs::read(&path).unwrap();
        let st = SafeTensors::deserialize(&back).unwrap();
        assert_eq!(read::<f32>(&st, "a", "t").unwrap(), a);
        assert_eq!(read::<f64>(&st, "b", "t").unwrap(), b);
        assert_eq!(read::<u32>(&st, "c", "t").unwrap(), c);
        assert_eq!(read::<i32>(&st, "d", "t").unwrap(), d);
        assert_eq!(read::<u64>(&st, "e", "t").unwrap(), e);
        let wrong = read::<u32>(&st, "a", "t.safetensors")
            .unwrap_err()
            .to_string();
        assert!(
            wrong.contains("t.safetensors: tensor a is F32, expected U32"),
            "{wrong}"
        );
        assert!(!path.with_extension("tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
