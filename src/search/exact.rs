//! A tenant's exact vectors, end to end, as `vectors.rs` rescores them. A small tenant's
//! are on the heap; once they pass `VectorFiles::from_bytes`, they move to an unnamed file
//! of their own that the process maps. A search reads only the hundred or so vectors it
//! rescores, the scan reads the 8-bit copies, so the exact vectors are most of an index's
//! bytes and the least of its reads: in the page cache the kernel can write them out and
//! drop them under memory pressure, where on the heap a process over its limit is killed,
//! taking every tenant's memory with it (BENCHMARKS.md, "a leaner index"). While the pages
//! are resident, reading them costs what reading the heap does.
//!
//! The file is made with `tempfile`, so it has no name in the directory and is gone when
//! the index is dropped or the process dies. Its blocks are allocated before they are
//! mapped (`fallocate`), so on the usual filesystems a full disk refuses the growth, and
//! the vectors go back to the heap, instead of a write through the map faulting. A disk
//! that fails while a paged-out vector is read back stops the process (SIGBUS), as it
//! would any program reading a mapped file. A directory in memory (tmpfs) would hold the
//! vectors in memory all the same, reserved twice over as the file grows: the default
//! directory is not used when it is one.

use std::fs::File;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use memmap2::{MmapMut, MmapOptions, RemapOptions};

/// Where the exact vectors of a store's tenant indexes go: one per store, shared by its
/// indexes, which also add up what they have mapped, for `/metrics`.
#[derive(Clone)]
pub struct VectorFiles(Arc<Files>);

struct Files {
    /// None: every index keeps its vectors on the heap.
    dir: Option<PathBuf>,
    /// An index whose exact vectors reach this many bytes moves them to a file.
    from_bytes: usize,
    mapped: AtomicUsize,
    /// Whether a failure to make or grow a file has been logged.
    warned: AtomicBool,
}

/// Where the exact vectors of large tenants go, as configured (`INDEX_VECTORS_DIR`).
#[derive(Debug, Clone, PartialEq)]
pub enum VectorHome {
    /// On the heap, whatever the tenant's size.
    Memory,
    /// In files in `dir`. `chosen` when the operator named it: a directory that cannot
    /// hold a file then refuses the start, where the default only warns and keeps the
    /// vectors on the heap.
    Files { dir: PathBuf, chosen: bool },
}

/// Where exact vectors move once a tenant's reach this many bytes (about 680 memories at
/// width 384): below it a file and a mapping cost more than they save.
pub const FROM_BYTES: usize = 1 << 20;

impl VectorFiles {
    /// Exact vectors on the heap, whatever their size.
    pub fn heap() -> VectorFiles {
        VectorFiles::with(None, usize::MAX)
    }

    /// Exact vectors in files in `dir` once an index's reach `from_bytes` (`FROM_BYTES`).
    pub fn in_dir(dir: PathBuf, from_bytes: usize) -> VectorFiles {
        VectorFiles::with(Some(dir), from_bytes)
    }

    fn with(dir: Option<PathBuf>, from_bytes: usize) -> VectorFiles {
        VectorFiles(Arc::new(Files {
            dir,
            from_bytes,
            mapped: AtomicUsize::new(0),
            warned: AtomicBool::new(false),
        }))
    }

    /// Where `home` says, checked: a directory the operator chose that cannot hold a file
    /// is an error; the default directory that cannot is warned about, and the vectors
    /// stay on the heap.
    pub fn open(home: &VectorHome, from_bytes: usize) -> std::io::Result<VectorFiles> {
        let VectorHome::Files { dir, chosen } = home else {
            return Ok(VectorFiles::heap());
        };
        let files = VectorFiles::in_dir(dir.clone(), from_bytes);
        let usable = files.check().and_then(|()| {
            if *chosen || !in_memory(dir) {
                Ok(())
            } else {
                Err(std::io::Error::other("it is in memory (tmpfs)"))
            }
        });
        match usable {
            Ok(()) => Ok(files),
            Err(e) if *chosen => Err(e),
            Err(e) => {
                files.warn_once("use", &e);
                Ok(VectorFiles::heap())
            }
        }
    }

    /// Makes a file in the directory, as an index would, so a directory that cannot hold
    /// one is refused at start rather than found out at the first large tenant.
    fn check(&self) -> std::io::Result<()> {
        match &self.0.dir {
            Some(dir) => tempfile::tempfile_in(dir).map(drop),
            None => Ok(()),
        }
    }

    /// What the indexes have mapped together, in bytes (files' allocated length).
    pub fn mapped_bytes(&self) -> usize {
        self.0.mapped.load(Ordering::Relaxed)
    }

    /// Logs, once per store, that vectors stay on the heap: the next index would fail the
    /// same way, and the operator has one thing to fix.
    fn warn_once(&self, what: &str, error: &std::io::Error) {
        if !self.0.warned.swap(true, Ordering::Relaxed) {
            let dir = self.0.dir.as_deref().unwrap_or(std::path::Path::new(""));
            let message = format!(
                "could not {what} a file in {} ({error}): index vectors stay on the heap; \
                 set INDEX_VECTORS_DIR to a directory on a disk, or to `memory`",
                dir.display()
            );
            crate::log::error("index_vectors_on_heap", &message, &Default::default());
        }
    }
}

/// The exact values, `len` of them, on the heap or in a mapped file.
pub struct Exact {
    files: VectorFiles,
    held: Held,
}

enum Held {
    Heap(Vec<f32>),
    File(Mapped),
}

struct Mapped {
    file: File,
    map: MmapMut,
    /// Values in use; the map holds `map.len() / 4`.
    len: usize,
}

const VALUE: usize = std::mem::size_of::<f32>();

impl Exact {
    pub fn new(files: VectorFiles) -> Exact {
        Exact {
            files,
            held: Held::Heap(Vec::new()),
        }
    }

    /// Appends `row` cut or padded with zeros to `width` values, and returns it as held.
    pub fn push_row(&mut self, row: &[f32], width: usize) -> &[f32] {
        let start = self.len();
        self.reserve(width);
        match &mut self.held {
            Held::Heap(values) => {
                values.extend(row.iter().take(width));
                values.resize(start + width, 0.0);
            }
            Held::File(mapped) => {
                let end = start + width;
                let taken = row.len().min(width);
                let all = values_mut(&mut mapped.map);
                all[start..start + taken].copy_from_slice(&row[..taken]);
                all[start + taken..end].fill(0.0);
                mapped.len = end;
            }
        }
        &self[start..]
    }

    /// Moves the last row (`last`, `width` values) over row `to`, as `Vec::swap_remove`.
    pub fn swap_remove_row(&mut self, to: usize, last: usize, width: usize) {
        debug_assert_eq!(self.len(), (last + 1) * width, "`last` is the last row");
        let values = self.values_mut();
        if to != last {
            values.copy_within(last * width..(last + 1) * width, to * width);
        }
        match &mut self.held {
            Held::Heap(values) => values.truncate(last * width),
            Held::File(mapped) => mapped.len = last * width,
        }
    }

    /// Bytes on the heap (the map's are the page cache's: `VectorFiles::mapped_bytes`).
    pub fn heap_bytes(&self) -> usize {
        match &self.held {
            Held::Heap(values) => values.len() * VALUE,
            Held::File(_) => 0,
        }
    }

    fn values_mut(&mut self) -> &mut [f32] {
        match &mut self.held {
            Held::Heap(values) => values,
            Held::File(mapped) => &mut values_mut(&mut mapped.map)[..mapped.len],
        }
    }

    /// Room for `more` values: in a file once the heap would pass the threshold, a larger
    /// file once the file is full; back on the heap if the file cannot be made or grown.
    fn reserve(&mut self, more: usize) {
        let wanted = self.len() + more;
        let bytes = wanted * VALUE;
        let grown = match &mut self.held {
            Held::Heap(_) if bytes < self.files.0.from_bytes || self.files.0.dir.is_none() => {
                return;
            }
            Held::File(mapped) if bytes <= mapped.map.len() => return,
            Held::Heap(values) => Mapped::create(&self.files, values, bytes).map(Some),
            Held::File(mapped) => mapped.grow(&self.files, bytes).map(|()| None),
        };
        if let Err(error) = grown {
            let verb = if matches!(self.held, Held::Heap(_)) {
                "make"
            } else {
                "grow"
            };
            self.files.warn_once(verb, &error);
            if let Held::File(mapped) = &self.held {
                (self.files.0.mapped).fetch_sub(mapped.map.len(), Ordering::Relaxed);
                self.held = Held::Heap(values(&mapped.map)[..mapped.len].to_vec());
            }
            // Stays on the heap from now on: a threshold that is never reached again.
            self.files = VectorFiles::heap();
            return;
        }
        if let Ok(Some(mapped)) = grown {
            self.held = Held::File(mapped);
        }
    }
}

impl Mapped {
    /// A file holding `values`, with room for `bytes` (in whole steps of `room`).
    fn create(files: &VectorFiles, values: &[f32], bytes: usize) -> std::io::Result<Mapped> {
        let dir = files
            .0
            .dir
            .as_deref()
            .expect("only called with a directory");
        let file = tempfile::tempfile_in(dir)?;
        let capacity = room(bytes);
        allocate(&file, capacity)?;
        // SAFETY: the file has no name (`tempfile`): only this process's descriptor reaches
        // it (or a process of the same user through /proc, which nothing does), and this
        // process writes it only through this map, so nothing changes the mapped bytes
        // behind a reference.
        let mut map = unsafe { MmapOptions::new().len(capacity).map_mut(&file)? };
        // A search touches scattered rows: reading ahead around a fault brings in pages
        // nobody asked for.
        let _ = map.advise(memmap2::Advice::Random);
        values_mut(&mut map)[..values.len()].copy_from_slice(values);
        files.0.mapped.fetch_add(capacity, Ordering::Relaxed);
        Ok(Mapped {
            file,
            map,
            len: values.len(),
        })
    }

    /// Twice the room, or `bytes` if that is more.
    fn grow(&mut self, files: &VectorFiles, bytes: usize) -> std::io::Result<()> {
        let before = self.map.len();
        let capacity = room(bytes.max(2 * before));
        allocate(&self.file, capacity)?;
        // SAFETY: as in `create`; the map may move, and no reference into it outlives this
        // `&mut self`.
        unsafe {
            self.map
                .remap(capacity, RemapOptions::new().may_move(true))?
        };
        let _ = self.map.advise(memmap2::Advice::Random);
        files
            .0
            .mapped
            .fetch_add(capacity - before, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Exact {
    fn drop(&mut self) {
        if let Held::File(mapped) = &self.held {
            (self.files.0.mapped).fetch_sub(mapped.map.len(), Ordering::Relaxed);
        }
    }
}

impl Deref for Exact {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match &self.held {
            Held::Heap(values) => values,
            Held::File(mapped) => &values(&mapped.map)[..mapped.len],
        }
    }
}

/// `bytes` rounded up to whole 2 MiB (a file grows in steps a huge page could map).
fn room(bytes: usize) -> usize {
    const STEP: usize = 2 << 20;
    bytes.div_ceil(STEP).max(1) * STEP
}

/// Gives the file `bytes` of blocks on disk, so a write through the map never finds the
/// disk full.
fn allocate(file: &File, bytes: usize) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let length = libc::off_t::try_from(bytes).map_err(std::io::Error::other)?;
        // SAFETY: a plain system call on a file descriptor this process owns.
        match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, length) } {
            0 => Ok(()),
            error => Err(std::io::Error::from_raw_os_error(error)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        // Elsewhere a file's length does not reserve its blocks: keep the vectors on the
        // heap rather than risk a fault on a full disk.
        let _ = (file, bytes);
        Err(std::io::Error::other("vector files are for Linux only"))
    }
}

/// Whether `dir` is on a filesystem kept in memory (tmpfs, ramfs), where a file's pages are
/// memory the kernel cannot drop.
fn in_memory(dir: &std::path::Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        const TMPFS: i64 = 0x0102_1994;
        const RAMFS: i64 = 0x8584_58f6;
        let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: `statfs` fills the zeroed struct it is given, from a NUL-terminated path.
        let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statfs(path.as_ptr(), &mut stat) } != 0 {
            return false;
        }
        #[allow(clippy::unnecessary_cast)]
        let kind = stat.f_type as i64;
        kind == TMPFS || kind == RAMFS
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        false
    }
}

fn values(map: &[u8]) -> &[f32] {
    // A map starts on a page boundary and is whole pages long, so this never fails.
    bytemuck::cast_slice(map)
}

fn values_mut(map: &mut [u8]) -> &mut [f32] {
    bytemuck::cast_slice_mut(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(exact: &Exact, width: usize) -> Vec<Vec<f32>> {
        exact.chunks(width).map(<[f32]>::to_vec).collect()
    }

    /// The same rows pushed and removed on the heap and through a file that starts at the
    /// first row and grows: the same values, and the file's bytes counted and given back.
    #[test]
    fn a_file_holds_what_the_heap_holds_as_it_grows_and_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let width = 1000;
        let files = VectorFiles::in_dir(dir.path().to_owned(), 0);
        let mut heap = Exact::new(VectorFiles::heap());
        let mut mapped = Exact::new(files.clone());
        let mut count = 0;
        // 3,000 rows of 4,000 bytes: past 2 MiB, so the file grows more than once.
        for i in 0..3_000 {
            let row: Vec<f32> = (0..(i % 3) * 600).map(|j| (i * 7 + j) as f32).collect();
            assert_eq!(heap.push_row(&row, width), mapped.push_row(&row, width));
            count += 1;
            if i % 5 == 4 {
                heap.swap_remove_row(i % 7, count - 1, width);
                mapped.swap_remove_row(i % 7, count - 1, width);
                count -= 1;
            }
        }
        assert_eq!(rows(&heap, width), rows(&mapped, width));
        assert_eq!(mapped.len(), count * width);
        assert!(matches!(mapped.held, Held::File(_)));
        assert_eq!(mapped.heap_bytes(), 0);
        assert!(files.mapped_bytes() >= count * width * VALUE);
        drop(mapped);
        assert_eq!(files.mapped_bytes(), 0);
    }

    #[test]
    fn below_the_threshold_or_without_a_directory_it_stays_on_the_heap() {
        let dir = tempfile::tempdir().unwrap();
        let mut small = Exact::new(VectorFiles::in_dir(dir.path().to_owned(), 4096));
        small.push_row(&[1.0; 1023], 1023);
        assert!(matches!(small.held, Held::Heap(_)));
        small.push_row(&[2.0; 1023], 1023);
        assert!(matches!(small.held, Held::File(_)));
        assert_eq!(small.heap_bytes(), 0);
        assert_eq!(&small[1023..], &[2.0; 1023]);
        let mut heap = Exact::new(VectorFiles::heap());
        heap.push_row(&[1.0; 1 << 19], 1 << 19);
        assert!(matches!(heap.held, Held::Heap(_)));
    }

    /// A default directory in memory (tmpfs) is not used; one the operator chose is.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_default_directory_in_memory_keeps_the_vectors_on_the_heap() {
        let shm = PathBuf::from("/dev/shm");
        assert!(in_memory(&shm), "/dev/shm is a tmpfs on Linux");
        assert!(
            !in_memory(&std::env::current_dir().unwrap()),
            "the checkout is on a disk"
        );
        let default = VectorHome::Files {
            dir: shm.clone(),
            chosen: false,
        };
        assert!(VectorFiles::open(&default, 0).unwrap().0.dir.is_none());
        let chosen = VectorHome::Files {
            dir: shm.clone(),
            chosen: true,
        };
        assert_eq!(VectorFiles::open(&chosen, 0).unwrap().0.dir, Some(shm));
    }

    /// A directory that cannot hold a file: refused when chosen, the heap otherwise; an
    /// index whose file cannot be made keeps its vectors on the heap.
    #[test]
    fn a_directory_that_cannot_hold_a_file_keeps_the_vectors_on_the_heap() {
        let dir = PathBuf::from("/nonexistent/vectors");
        let chosen = VectorHome::Files {
            dir: dir.clone(),
            chosen: true,
        };
        assert!(VectorFiles::open(&chosen, 0).is_err());
        let default = VectorHome::Files {
            dir: dir.clone(),
            chosen: false,
        };
        assert!(VectorFiles::open(&default, 0).unwrap().0.dir.is_none());
        let files = VectorFiles::in_dir(dir, 0);
        let mut exact = Exact::new(files.clone());
        exact.push_row(&[1.0, 2.0], 2);
        exact.push_row(&[3.0, 4.0], 2);
        assert_eq!(&exact[..], &[1.0, 2.0, 3.0, 4.0]);
        assert!(matches!(exact.held, Held::Heap(_)));
        assert_eq!(files.mapped_bytes(), 0);
    }
}
