//! `trove.Client` and `trove.File` (native halves): namespace calls and file I/O through the
//! client library, every one with the GIL released while it waits.
//!
//! Reads land in the caller's memory with one copy from the verified shard buffers: `readinto`
//! writes straight into a bytearray, memoryview or NumPy array, and `read` fills a new `bytes`
//! object before Python sees it. Reads are cut at chunk boundaries, so each piece is a slice of
//! one chunk the client library already holds and is never gathered into a buffer of its own.
//!
//! Writes of `File` objects opened for writing go to a temporary name in the target directory
//! (`client::tmp_name`) and are renamed onto the final name only by a successful `close`, so a
//! failed or abandoned write never leaves something that looks like a finished file.
//!
//! Fork safety: a `Client` remembers the pid that connected; in a forked child the first call
//! connects again on the child's own runtime and the parent's connection is leaked (see the
//! crate's invariant). A `File` opened for reading reopens itself by inode in a child; one
//! opened for writing refuses (its buffered data belongs to the parent).

use crate::{os_error, pid, runtime, value_error};
use bytes::Bytes;
use parking_lot::Mutex;
use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::sync::Arc;
use tokio::runtime::Runtime;

/// Files `read_many` fetches at once by default.
const READ_MANY_CONCURRENCY_DEFAULT: usize = 16;
/// Most files `read_many` fetches at once.
const READ_MANY_CONCURRENCY_MAX: usize = 256;

/// A caller's writable, C-contiguous buffer, kept exported (so Python cannot free or resize it)
/// while Rust writes into it with the GIL released.
pub(crate) struct WritableBuffer<T: Element> {
    _buf: PyBuffer<T>,
    ptr: usize,
    len: usize,
}

impl<T: Element> WritableBuffer<T> {
    pub(crate) fn get(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Self> {
        let buf = PyBuffer::<T>::get(obj)
            .map_err(|e| value_error(format!("{what}: not a buffer of the right element type: {e}")))?;
        if buf.readonly() {
            return Err(value_error(format!("{what}: the buffer is read-only")));
        }
        let Some(slice) = buf.as_slice_ptr() else {
            return Err(value_error(format!("{what}: the buffer is not C-contiguous")));
        };
        let len = slice.len();
        let ptr = slice.as_ptr() as *mut T as usize;
        Ok(WritableBuffer { _buf: buf, ptr, len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The buffer's memory, for the duration of a borrow of `self`.
    #[allow(unsafe_code)]
    pub(crate) fn slice(&mut self) -> &mut [T] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: `_buf` holds the export of a writable, C-contiguous buffer of `len` elements
        // starting at `ptr` (checked in `get`); while an export is held the exporter may not
        // free or move the memory (bytearray and NumPy refuse to resize). The borrow of `self`
        // keeps the export alive and makes this the only Rust reference to it. Python code on
        // other threads may still touch the same memory concurrently, as with any readinto.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut T, self.len) }
    }
}

/// A connection to one Trove cluster (metadata service address `HOST:PORT`, several
/// comma-separated for failover).
#[pyclass(module = "trove._native", name = "Client", frozen)]
pub struct Client {
    addr: String,
    /// How connections are made (the TLS credential).
    options: client::ClientOptions,
    connection: Mutex<Option<(u32, client::Client)>>,
}

impl Client {
    /// The runtime and client library connection of this process, connecting (again, in a
    /// forked child) when needed.
    fn conn(&self, py: Python<'_>) -> PyResult<(Arc<Runtime>, client::Client)> {
        let rt = runtime()?;
        let me = pid();
        {
            let mut slot = self.connection.lock();
            match slot.take() {
                Some((p, c)) if p == me => {
                    *slot = Some((p, c.clone()));
                    return Ok((rt, c));
                }
                // Created in the parent: leaked, never dropped here (crate invariant).
                Some(parent) => std::mem::forget(parent),
                None => {}
            }
        }
        let addr = self.addr.clone();
        let options = self.options.clone();
        let rt2 = rt.clone();
        let c = py
            .detach(move || rt2.block_on(client::Client::connect_with(&addr, options)))
            .map_err(|e| os_error(e, &format!("trove cluster at {}", self.addr)))?;
        *self.connection.lock() = Some((me, c.clone()));
        Ok((rt, c))
    }

    /// Runs `f` on the runtime with the GIL released.
    fn call<T: Send, F>(&self, py: Python<'_>, path: &str, f: impl FnOnce(client::Client) -> F + Send) -> PyResult<T>
    where
        F: std::future::Future<Output = client::Result<T>>,
    {
        let (rt, c) = self.conn(py)?;
        py.detach(move || rt.block_on(f(c))).map_err(|e| os_error(e, path))
    }
}

fn kind_name(kind: client::FileKind) -> &'static str {
    match kind {
        client::FileKind::File => "file",
        client::FileKind::Dir => "directory",
        client::FileKind::Symlink => "symlink",
        _ => "other",
    }
}

fn attr_dict<'py>(py: Python<'py>, name: &str, a: &client::Attr) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", name)?;
    d.set_item("type", kind_name(a.kind))?;
    d.set_item("size", a.size)?;
    d.set_item("ino", a.ino)?;
    d.set_item("mode", a.mode)?;
    d.set_item("uid", a.uid)?;
    d.set_item("gid", a.gid)?;
    d.set_item("nlink", a.nlink)?;
    d.set_item("mtime", a.mtime.secs as f64 + f64::from(a.mtime.nanos) / 1e9)?;
    d.set_item("ctime", a.ctime.secs as f64 + f64::from(a.ctime.nanos) / 1e9)?;
    d.set_item("data_version", a.data_version)?;
    d.set_item("ec", a.ec.to_string())?;
    d.set_item("chunk_bytes", a.chunk_bytes)?;
    Ok(d)
}

fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn split_parent(path: &str) -> (&str, &str) {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rfind('/') {
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => ("", trimmed),
    }
}

/// Reads `out.len()` bytes (fewer at the end of the file) at `offset` into `out`, a chunk at a
/// time; returns how many were read.
async fn read_into(h: &mut client::FileHandle, offset: u64, out: &mut [u8]) -> client::Result<usize> {
    let chunk_bytes = u64::from(h.attr().chunk_bytes.max(1));
    let size = h.size();
    let mut done = 0usize;
    while done < out.len() {
        let pos = offset + done as u64;
        if pos >= size {
            break;
        }
        let in_chunk = chunk_bytes - pos % chunk_bytes;
        let want = (out.len() - done).min(in_chunk as usize).min((size - pos) as usize);
        let piece: Bytes = h.read_at(pos, want).await?;
        if piece.is_empty() {
            break;
        }
        out[done..done + piece.len()].copy_from_slice(&piece);
        done += piece.len();
    }
    Ok(done)
}

/// Writes a whole file under a temporary name in its directory and renames it into place.
async fn write_atomic(c: &client::Client, path: &str, data: &[u8]) -> client::Result<()> {
    let (dir, name) = split_parent(path);
    if name.is_empty() {
        return Err(client::WireError::new(client::ErrorCode::Invalid, format!("path {path:?} names no file")));
    }
    let tmp = join(dir, &client::tmp_name());
    let written = async {
        let mut h = c.create_path(&tmp, 0o644).await?;
        h.write_at(0, data).await?;
        h.close().await?;
        let (parent, tmp_name) = c.parent_of(&tmp).await?;
        let (new_parent, final_name) = c.parent_of(path).await?;
        c.rename(parent, tmp_name, new_parent, final_name).await
    }
    .await;
    if written.is_err() {
        if let Ok((parent, tmp_name)) = c.parent_of(&tmp).await {
            let _ = c.unlink(parent, tmp_name).await;
        }
    }
    written
}

#[pymethods]
impl Client {
    /// Connects to the cluster whose metadata service is at `addr` (`HOST:PORT`, or several
    /// comma-separated), in TLS with the credential in the directory `credentials` (ca.pem,
    /// cert.pem, key.pem), or in plaintext without one.
    #[new]
    #[pyo3(signature = (addr, credentials=None))]
    fn new(py: Python<'_>, addr: &str, credentials: Option<&str>) -> PyResult<Self> {
        if addr.trim().is_empty() {
            return Err(value_error("no metadata service address given"));
        }
        let tls = match credentials {
            Some(dir) => Some(
                client::tls::TlsContext::load(std::path::Path::new(dir))
                    .map_err(|e| value_error(format!("cannot use the TLS credential in {dir}: {e}")))?,
            ),
            None => None,
        };
        let options = client::ClientOptions { tls: client::tls::TlsChoice::Explicit(tls), ..Default::default() };
        let me = Client { addr: addr.to_string(), options, connection: Mutex::new(None) };
        me.conn(py)?;
        Ok(me)
    }

    /// The metadata service address this client was made with.
    #[getter]
    fn address(&self) -> String {
        self.addr.clone()
    }

    /// Attributes of `path` as a dict (name, type, size, ino, mode, mtime, ec, ...).
    fn stat<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
        let p = path.to_string();
        let a = self.call(py, path, |c| async move { c.resolve(&p).await })?;
        let (_, name) = split_parent(path);
        attr_dict(py, name, &a)
    }

    /// Names in directory `path`, in byte order.
    fn listdir<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyList>> {
        let entries = self.readdir(py, path)?;
        PyList::new(py, entries.iter().map(|e| e.name.as_str()))
    }

    /// Entries of directory `path` with their attributes (dicts as `stat` returns).
    fn scandir<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyList>> {
        let entries = self.readdir(py, path)?;
        let list = PyList::empty(py);
        for e in &entries {
            list.append(attr_dict(py, &e.name, &e.attr)?)?;
        }
        Ok(list)
    }

    /// Creates directory `path` and any missing parents; an existing directory is an error
    /// unless `exist_ok`.
    #[pyo3(signature = (path, exist_ok = true))]
    fn makedirs(&self, py: Python<'_>, path: &str, exist_ok: bool) -> PyResult<()> {
        let p = path.to_string();
        self.call(py, path, |c| async move {
            if !exist_ok && c.resolve(&p).await.is_ok() {
                return Err(client::WireError::new(client::ErrorCode::Exists, format!("{p:?} exists")));
            }
            c.mkdir_p(&p).await.map(|_| ())
        })
    }

    /// Creates directory `path` (its parent must exist).
    fn mkdir(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let p = path.to_string();
        self.call(py, path, |c| async move {
            let (parent, name) = c.parent_of(&p).await?;
            c.mkdir(parent, name, 0o755).await.map(|_| ())
        })
    }

    /// Removes file `path`.
    fn remove(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let p = path.to_string();
        self.call(py, path, |c| async move {
            let (parent, name) = c.parent_of(&p).await?;
            let a = c.lookup(parent, name).await?;
            if a.kind == client::FileKind::Dir {
                return Err(client::WireError::new(client::ErrorCode::IsDir, format!("{p:?} is a directory")));
            }
            c.unlink(parent, name).await
        })
    }

    /// Removes the empty directory `path`.
    fn rmdir(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let p = path.to_string();
        self.call(py, path, |c| async move {
            let (parent, name) = c.parent_of(&p).await?;
            c.rmdir(parent, name).await
        })
    }

    /// Renames `src` to `dst`, replacing a file at `dst`.
    fn rename(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
        let (s, d) = (src.to_string(), dst.to_string());
        self.call(py, &format!("{src} -> {dst}"), |c| async move {
            let (parent, name) = c.parent_of(&s).await?;
            let (new_parent, new_name) = c.parent_of(&d).await?;
            c.rename(parent, name, new_parent, new_name).await
        })
    }

    /// `length` bytes of file `path` from `offset` (to the end with -1), as `bytes`.
    #[pyo3(signature = (path, offset = 0, length = -1))]
    fn read<'py>(&self, py: Python<'py>, path: &str, offset: u64, length: i64) -> PyResult<Bound<'py, PyBytes>> {
        let p = path.to_string();
        let mut h = self.call(py, path, |c| async move { c.open_path(&p).await })?;
        let available = h.size().saturating_sub(offset);
        let n = if length < 0 { available } else { available.min(length as u64) } as usize;
        let (rt, _) = self.conn(py)?;
        let mut failure = None;
        let bytes = PyBytes::new_with(py, n, |out| {
            // The new object is not visible to any other Python code yet.
            match py.detach(|| rt.block_on(read_into(&mut h, offset, out))) {
                Ok(got) if got == n => {}
                Ok(got) => {
                    failure = Some(os_error(
                        client::WireError::new(
                            client::ErrorCode::Io,
                            format!("read {got} of {n} bytes: the file shrank"),
                        ),
                        path,
                    ))
                }
                Err(e) => failure = Some(os_error(e, path)),
            }
            Ok(())
        })?;
        match failure {
            Some(e) => Err(e),
            None => Ok(bytes),
        }
    }

    /// Reads file `path` from `offset` into `buffer` (a writable bytes-like object: bytearray,
    /// memoryview, NumPy array) without an intermediate object; returns the bytes read.
    #[pyo3(signature = (path, buffer, offset = 0))]
    fn readinto(&self, py: Python<'_>, path: &str, buffer: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        let mut out = WritableBuffer::<u8>::get(buffer, "readinto")?;
        let p = path.to_string();
        let (rt, c) = self.conn(py)?;
        let dst = out.slice();
        py.detach(move || {
            rt.block_on(async move {
                let mut h = c.open_path(&p).await?;
                read_into(&mut h, offset, dst).await
            })
        })
        .map_err(|e| os_error(e, path))
    }

    /// Whole contents of several files, fetched concurrently (`concurrency` at a time): what a
    /// loader's read-ahead asks for. Fails with the first error, naming its path.
    #[pyo3(signature = (paths, concurrency = READ_MANY_CONCURRENCY_DEFAULT))]
    fn read_many<'py>(&self, py: Python<'py>, paths: Vec<String>, concurrency: usize) -> PyResult<Bound<'py, PyList>> {
        let concurrency = concurrency.clamp(1, READ_MANY_CONCURRENCY_MAX);
        let (rt, c) = self.conn(py)?;
        let results: Vec<(String, client::Result<Bytes>)> = py.detach(move || {
            rt.block_on(async move {
                let semaphore = Arc::new(tokio::sync::Semaphore::new(concurrency));
                let tasks: Vec<_> = paths
                    .into_iter()
                    .map(|p| {
                        let (c, semaphore) = (c.clone(), semaphore.clone());
                        tokio::spawn(async move {
                            let _permit = semaphore.acquire_owned().await;
                            let r = c.read_file(&p).await;
                            (p, r)
                        })
                    })
                    .collect();
                let mut out = Vec::with_capacity(tasks.len());
                for t in tasks {
                    out.push(t.await.unwrap_or_else(|e| {
                        (
                            String::new(),
                            Err(client::WireError::new(client::ErrorCode::Internal, format!("read task failed: {e}"))),
                        )
                    }));
                }
                out
            })
        });
        let list = PyList::empty(py);
        for (p, r) in results {
            let data = r.map_err(|e| os_error(e, &p))?;
            list.append(PyBytes::new(py, &data))?;
        }
        Ok(list)
    }

    /// Writes `data` (bytes-like) as the whole content of file `path`, atomically: written under
    /// a temporary name and renamed into place once durable.
    fn write(&self, py: Python<'_>, path: &str, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let buf = PyBuffer::<u8>::get(data).map_err(|e| value_error(format!("write: data is not bytes-like: {e}")))?;
        let bytes = buf.to_vec(py)?;
        let p = path.to_string();
        self.call(py, path, |c| async move { write_atomic(&c, &p, &bytes).await })
    }

    /// Opens file `path`: mode "rb" (read) or "wb" (write a new content, published at close).
    #[pyo3(signature = (path, mode = "rb"))]
    fn open(&self, py: Python<'_>, path: &str, mode: &str) -> PyResult<File> {
        let p = path.to_string();
        match mode {
            "rb" | "r" => {
                let (_, c) = self.conn(py)?;
                let h = self.call(py, path, |c| async move { c.open_path(&p).await })?;
                Ok(File::new(self.addr.clone(), self.options.clone(), path, None, c, h))
            }
            "wb" | "w" => {
                let (dir, name) = split_parent(path);
                if name.is_empty() {
                    return Err(value_error(format!("path {path:?} names no file")));
                }
                let tmp = join(dir, &client::tmp_name());
                let t = tmp.clone();
                let (_, c) = self.conn(py)?;
                let h = self.call(py, path, |c| async move {
                    // The target's directory must exist and the target must not be one.
                    if let Ok(a) = c.resolve(&p).await {
                        if a.kind == client::FileKind::Dir {
                            return Err(client::WireError::new(
                                client::ErrorCode::IsDir,
                                format!("{p:?} is a directory"),
                            ));
                        }
                    }
                    c.create_path(&t, 0o644).await
                })?;
                Ok(File::new(self.addr.clone(), self.options.clone(), path, Some(tmp), c, h))
            }
            other => Err(PyValueError::new_err(format!("mode {other:?} is not supported: use \"rb\" or \"wb\""))),
        }
    }

    /// Whether `path` exists.
    fn exists(&self, py: Python<'_>, path: &str) -> PyResult<bool> {
        let p = path.to_string();
        let (rt, c) = self.conn(py)?;
        match py.detach(move || rt.block_on(async move { c.resolve(&p).await })) {
            Ok(_) => Ok(true),
            Err(e) if e.code == client::ErrorCode::NotFound || e.code == client::ErrorCode::NotDir => Ok(false),
            Err(e) => Err(os_error(e, path)),
        }
    }

    /// The pid whose connection this client holds now (for tests of fork safety).
    fn connected_pid(&self) -> Option<u32> {
        self.connection.lock().as_ref().map(|(p, _)| *p)
    }
}

impl Client {
    fn readdir(&self, py: Python<'_>, path: &str) -> PyResult<Vec<client::DirEntry>> {
        let p = path.to_string();
        self.call(py, path, |c| async move {
            let a = c.resolve(&p).await?;
            if a.kind != client::FileKind::Dir {
                return Err(client::WireError::new(client::ErrorCode::NotDir, format!("{p:?} is not a directory")));
            }
            let entries = c.readdir(a.ino).await?;
            Ok(entries.into_iter().filter(|e| !client::is_tmp_name(&e.name)).collect())
        })
    }
}

struct OpenFile {
    pid: u32,
    client: client::Client,
    handle: client::FileHandle,
}

/// An open file (native half of `trove.File`, an `io.RawIOBase`). Its state is locked only
/// with the GIL released, so a thread waiting for it never holds the GIL that the thread
/// inside needs to finish.
#[pyclass(module = "trove._native", name = "File", frozen)]
pub struct File {
    addr: String,
    options: client::ClientOptions,
    path: String,
    ino: u64,
    /// For a file opened for writing: the temporary name its bytes go to until `close`.
    tmp: Option<String>,
    state: Mutex<FileState>,
}

struct FileState {
    open: Option<OpenFile>,
    pos: u64,
    closed: bool,
}

/// Why a file operation failed, before it is turned into a Python exception.
enum FileError {
    Closed,
    Trove(client::WireError),
}

impl From<client::WireError> for FileError {
    fn from(e: client::WireError) -> Self {
        FileError::Trove(e)
    }
}

impl File {
    fn new(
        addr: String,
        options: client::ClientOptions,
        path: &str,
        tmp: Option<String>,
        client: client::Client,
        handle: client::FileHandle,
    ) -> File {
        File {
            addr,
            options,
            path: path.to_string(),
            ino: handle.ino(),
            tmp,
            state: Mutex::new(FileState { open: Some(OpenFile { pid: pid(), client, handle }), pos: 0, closed: false }),
        }
    }

    /// Runs `f` on this process's handle and the file position, with the GIL released; in a
    /// forked child a read handle is first reopened by inode on a connection of the child.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Runtime, &mut OpenFile, &mut u64) -> Result<T, FileError> + Send,
    ) -> PyResult<T> {
        let rt = runtime()?;
        let me = pid();
        let result = py.detach(|| {
            let mut state = self.state.lock();
            if state.closed {
                return Err(FileError::Closed);
            }
            if state.open.as_ref().is_some_and(|o| o.pid != me) {
                if let Some(parent) = state.open.take() {
                    // The parent's (crate invariant): leaked, never dropped here.
                    std::mem::forget(parent);
                }
                if self.tmp.is_some() {
                    return Err(FileError::Trove(client::WireError::new(
                        client::ErrorCode::Invalid,
                        "a file opened for writing before a fork cannot be used in the child; open it there",
                    )));
                }
            }
            if state.open.is_none() {
                let (client, handle) = rt.block_on(async {
                    let c = client::Client::connect_with(&self.addr, self.options.clone()).await?;
                    let h = c.open(self.ino).await?;
                    Ok::<_, client::WireError>((c, h))
                })?;
                state.open = Some(OpenFile { pid: me, client, handle });
            }
            let FileState { open, pos, .. } = &mut *state;
            match open.as_mut() {
                Some(o) => f(&rt, o, pos),
                None => Err(FileError::Closed),
            }
        });
        result.map_err(|e| match e {
            FileError::Closed => value_error("I/O operation on closed file"),
            FileError::Trove(e) => os_error(e, &self.path),
        })
    }
}

#[pymethods]
impl File {
    /// The path the file was opened with.
    #[getter]
    fn path(&self) -> String {
        self.path.clone()
    }

    /// Whether the file was opened for writing.
    #[getter]
    fn writable(&self) -> bool {
        self.tmp.is_some()
    }

    /// The file's size as this handle sees it (including its own buffered writes).
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, |_, o, _| Ok(o.handle.size()))
    }

    fn tell(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, |_, _, pos| Ok(*pos))
    }

    /// Moves the position: `whence` 0 = from the start, 1 = from the position, 2 = from the end.
    #[pyo3(signature = (offset, whence = 0))]
    fn seek(&self, py: Python<'_>, offset: i64, whence: i32) -> PyResult<u64> {
        let r = self.run(py, |_, o, pos| {
            let base = match whence {
                0 => 0i128,
                1 => i128::from(*pos),
                2 => i128::from(o.handle.size()),
                _ => return Ok(Err(format!("whence {whence} is not 0, 1 or 2"))),
            };
            let target = base + i128::from(offset);
            if target < 0 {
                return Ok(Err(format!("seek to a negative position ({target})")));
            }
            *pos = target as u64;
            Ok(Ok(*pos))
        })?;
        r.map_err(value_error)
    }

    /// Reads up to `size` bytes from the position (to the end with -1) as `bytes`.
    #[pyo3(signature = (size = -1))]
    fn read<'py>(&self, py: Python<'py>, size: i64) -> PyResult<Bound<'py, PyBytes>> {
        let (file_size, at) = self.run(py, |_, o, pos| Ok((o.handle.size(), *pos)))?;
        let available = file_size.saturating_sub(at);
        let n = if size < 0 { available } else { available.min(size as u64) } as usize;
        let mut result = Ok(0);
        let bytes = PyBytes::new_with(py, n, |out| {
            // The new object is not visible to any other Python code yet.
            result = self.run(py, |rt, o, pos| {
                let got = rt.block_on(read_into(&mut o.handle, *pos, out))?;
                *pos += got as u64;
                Ok(got)
            });
            Ok(())
        })?;
        match result {
            Ok(got) if got == n => Ok(bytes),
            Ok(got) => Ok(PyBytes::new(py, &bytes.as_bytes()[..got])),
            Err(e) => Err(e),
        }
    }

    /// Reads into `buffer` (bytearray, memoryview, NumPy array) from the position; returns the
    /// bytes read (0 at the end of the file).
    fn readinto(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
        let mut out = WritableBuffer::<u8>::get(buffer, "readinto")?;
        let dst = out.slice();
        self.run(py, move |rt, o, pos| {
            let got = rt.block_on(read_into(&mut o.handle, *pos, dst))?;
            *pos += got as u64;
            Ok(got)
        })
    }

    /// Writes bytes-like `data` at the position; returns its length. Buffered in whole chunks
    /// and uploaded as they fill; published under the file's name by `close`.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        if self.tmp.is_none() {
            return Err(value_error(format!("{:?} was not opened for writing", self.path)));
        }
        let buf = PyBuffer::<u8>::get(data).map_err(|e| value_error(format!("write: data is not bytes-like: {e}")))?;
        let bytes = buf.to_vec(py)?;
        self.run(py, move |rt, o, pos| {
            rt.block_on(o.handle.write_at(*pos, &bytes))?;
            *pos += bytes.len() as u64;
            Ok(bytes.len())
        })
    }

    /// Discards a file being written: its temporary file is removed and the target is left as
    /// it was (what leaving a `with` block by an exception does). For a read handle, closes it.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        let Some(tmp) = self.tmp.clone() else { return self.close(py) };
        let r = self.run(py, move |rt, o, _| {
            let client = o.client.clone();
            rt.block_on(async {
                let (parent, name) = client.parent_of(&tmp).await?;
                match client.unlink(parent, name).await {
                    Err(e) if e.code != client::ErrorCode::NotFound => Err(FileError::Trove(e)),
                    _ => Ok(()),
                }
            })
        });
        let mut state = self.state.lock();
        state.closed = true;
        if let Some(o) = state.open.take() {
            if o.pid != pid() {
                std::mem::forget(o);
            }
        }
        match r {
            Err(e) if e.is_instance_of::<PyValueError>(py) => Ok(()),
            other => other,
        }
    }

    /// Whether `close` has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Closes the file. For a file opened for writing: uploads what is buffered, makes it
    /// durable and renames it onto the target name; on failure the temporary file is removed
    /// and the target is left as it was.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let tmp = self.tmp.clone();
        let path = self.path.clone();
        let r = self.run(py, move |rt, o, _| {
            let Some(tmp) = tmp else { return Ok(()) };
            let client = o.client.clone();
            rt.block_on(async {
                let published = async {
                    o.handle.flush().await?;
                    let (parent, name) = client.parent_of(&tmp).await?;
                    let (new_parent, new_name) = client.parent_of(&path).await?;
                    client.rename(parent, name, new_parent, new_name).await
                }
                .await;
                if published.is_err() {
                    if let Ok((parent, name)) = client.parent_of(&tmp).await {
                        let _ = client.unlink(parent, name).await;
                    }
                }
                published.map_err(FileError::from)
            })
        });
        let mut state = self.state.lock();
        state.closed = true;
        if let Some(o) = state.open.take() {
            if o.pid == pid() {
                drop(o);
            } else {
                std::mem::forget(o);
            }
        }
        match r {
            // Closing twice is fine, as with Python's files.
            Err(e) if e.is_instance_of::<PyValueError>(py) => Ok(()),
            other => other,
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let mut state = self.state.lock();
        let Some(o) = state.open.take() else { return };
        if o.pid != pid() {
            std::mem::forget(o);
            return;
        }
        // An abandoned write (never closed): its temporary file is removed, the target is
        // untouched.
        if let (Some(tmp), Ok(rt)) = (self.tmp.clone(), runtime()) {
            let OpenFile { client, handle, .. } = o;
            drop(handle);
            rt.spawn(async move {
                if let Ok((parent, name)) = client.parent_of(&tmp).await {
                    let _ = client.unlink(parent, name).await;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_parent_and_name() {
        assert_eq!(split_parent("/a/b/c.jpg"), ("/a/b", "c.jpg"));
        assert_eq!(split_parent("/a/"), ("", "a"));
        assert_eq!(split_parent("top"), ("", "top"));
        assert_eq!(split_parent("/"), ("", ""));
        assert_eq!(join("/a", "b"), "/a/b");
        assert_eq!(join("/", "b"), "/b");
        assert_eq!(join("", "b"), "/b");
    }
}
