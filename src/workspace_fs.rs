//! Files inside a session's workspace, opened so that no symlink can lead out of it.
//!
//! A sandboxed command shares the workspace folder with the service and may plant or swap
//! symlinks at any moment, so checking a path and then opening it (`canonicalize`, then
//! `fs::read`) is a race the command can win. Here every step is one `openat` relative to
//! the folder handle opened before it, with `O_NOFOLLOW`: a symlink anywhere on the path —
//! planted before the call or swapped in during it — makes the call fail (`ELOOP` or
//! `ENOTDIR`), never leads outside. `..` and absolute paths are refused before any file
//! system call. Symlinks inside the workspace are refused too: nothing the service itself
//! writes there is one.
//!
//! Owns the walking and the no-follow flags; knows nothing of tools, media or channels.

use rustix::fs::{FileType, Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

/// Why a workspace path was not opened, in words for the model or the user.
pub fn describe(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(code)
            if code == rustix::io::Errno::LOOP.raw_os_error()
                || code == rustix::io::Errno::NOTDIR.raw_os_error() =>
        {
            "the path goes through a symlink or a file where a folder should be (links are not followed)".into()
        }
        _ if error.kind() == io::ErrorKind::NotFound => "no such file or folder".into(),
        _ => error.to_string(),
    }
}

/// The names of `relative`'s parts; `..`, absolute paths and `~` are refused.
pub fn parts(relative: &Path) -> io::Result<Vec<&std::ffi::OsStr>> {
    let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, why.to_string());
    if relative.as_os_str().as_encoded_bytes().first() == Some(&b'~') {
        return Err(invalid(
            "absolute paths are not allowed; use a path inside the workspace",
        ));
    }
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(invalid("`..` is not allowed; stay inside the workspace"));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(invalid(
                    "absolute paths are not allowed; use a path inside the workspace",
                ));
            }
        }
    }
    Ok(names)
}

/// A file path's folders and its own name.
fn file_parts<'a, 'b>(
    names: &'b [&'a std::ffi::OsStr],
) -> io::Result<(&'a std::ffi::OsStr, &'b [&'a std::ffi::OsStr])> {
    match names.split_last() {
        Some((last, folders)) => Ok((*last, folders)),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a file path is needed",
        )),
    }
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// The workspace root itself (created when missing; it is the operator's, so a link there is
/// theirs to make).
fn root_dir(root: &Path) -> io::Result<OwnedFd> {
    std::fs::create_dir_all(root)?;
    Ok(rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Walks `names` from `dir`, each step a no-follow `openat`; `create` makes missing folders.
fn walk(mut dir: OwnedFd, names: &[&std::ffi::OsStr], create: bool) -> io::Result<OwnedFd> {
    for name in names {
        if create {
            match rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        dir = rustix::fs::openat(&dir, *name, DIR_FLAGS, Mode::empty())?;
    }
    Ok(dir)
}

fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")
}

/// The size of the regular file `fd` is; anything else (a FIFO, a device, a folder) is
/// refused.
fn regular_size(fd: &OwnedFd) -> io::Result<u64> {
    let stat = rustix::fs::fstat(fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(not_regular());
    }
    Ok(stat.st_size as u64)
}

/// A folder of the workspace (`.` or empty: the workspace itself), for listing.
pub fn open_dir(root: &Path, relative: &Path) -> io::Result<OwnedFd> {
    let names = parts(relative)?;
    walk(root_dir(root)?, &names, false)
}

/// A regular file of the workspace, opened for reading, with its size. A FIFO, device or
/// folder is refused (reading one would block or mislead).
pub fn open_read(root: &Path, relative: &Path) -> io::Result<(File, u64)> {
    let names = parts(relative)?;
    let (last, folders) = file_parts(&names)?;
    let dir = walk(root_dir(root)?, folders, false)?;
    // NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
    let fd = rustix::fs::openat(
        &dir,
        last,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let size = regular_size(&fd)?;
    // Back to blocking reads for the caller.
    rustix::fs::fcntl_setfl(&fd, OFlags::empty())?;
    Ok((File::from(fd), size))
}

/// How [`create_file`] treats a file that is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Replace its content (it must be a regular file, not a link).
    Truncate,
    /// Fail with `AlreadyExists` (for picking an unused name).
    Refuse,
}

/// A file of the workspace opened for writing, its folders created as needed; a link on the
/// way or in its place is refused.
pub fn create_file(root: &Path, relative: &Path, existing: Existing) -> io::Result<File> {
    let names = parts(relative)?;
    let (last, folders) = file_parts(&names)?;
    let dir = walk(root_dir(root)?, folders, true)?;
    let mut flags =
        OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    flags |= match existing {
        Existing::Truncate => OFlags::empty(),
        Existing::Refuse => OFlags::EXCL,
    };
    let fd = match rustix::fs::openat(&dir, last, flags, Mode::from_raw_mode(0o644)) {
        Ok(fd) => fd,
        // A FIFO with no reader (opened without blocking): not a file to write.
        Err(rustix::io::Errno::NXIO) => return Err(not_regular()),
        Err(e) => return Err(e.into()),
    };
    regular_size(&fd)?;
    // Truncate only once it is known to be a regular file of the workspace.
    rustix::fs::ftruncate(&fd, 0)?;
    rustix::fs::fcntl_setfl(&fd, OFlags::empty())?;
    Ok(File::from(fd))
}

/// The names in a workspace folder, folders marked with a trailing `/`, sorted.
pub fn list(root: &Path, relative: &Path) -> io::Result<Vec<String>> {
    let dir = open_dir(root, relative)?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        let mark = if entry.file_type() == FileType::Directory {
            "/"
        } else {
            ""
        };
        names.push(format!("{name}{mark}"));
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, std::path::PathBuf) {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(base.path().join("secret.txt"), "secret").unwrap();
        std::fs::write(root.join("sub/ok.txt"), "fine").unwrap();
        (base, root)
    }

    #[test]
    fn reads_stay_inside_and_follow_no_link() {
        let (base, root) = setup();
        symlink(base.path().join("secret.txt"), root.join("link.txt")).unwrap();
        symlink(base.path(), root.join("out")).unwrap();
        symlink(root.join("sub"), root.join("inside")).unwrap();
        let (mut file, size) = open_read(&root, Path::new("sub/ok.txt")).unwrap();
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        assert_eq!((text.as_str(), size), ("fine", 4));
        for bad in [
            "link.txt",
            "out/secret.txt",
            "inside/ok.txt",
            "../secret.txt",
            "/etc/passwd",
            "~/x",
            "sub",
        ] {
            assert!(open_read(&root, Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn writes_refuse_planted_links_and_dangling_ones() {
        let (base, root) = setup();
        let victim = base.path().join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        // A folder swapped for a link out, and a dangling link where the file would go.
        symlink(&victim, root.join("inbox")).unwrap();
        symlink(victim.join("planted"), root.join("sub/new.txt")).unwrap();
        assert!(create_file(&root, Path::new("inbox/a.txt"), Existing::Refuse).is_err());
        assert!(create_file(&root, Path::new("sub/new.txt"), Existing::Truncate).is_err());
        assert!(create_file(&root, Path::new("sub/new.txt"), Existing::Refuse).is_err());
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0);
        // A link to an existing file outside is not truncated through.
        symlink(base.path().join("secret.txt"), root.join("s.txt")).unwrap();
        assert!(create_file(&root, Path::new("s.txt"), Existing::Truncate).is_err());
        assert_eq!(
            std::fs::read_to_string(base.path().join("secret.txt")).unwrap(),
            "secret"
        );
        let mut file = create_file(&root, Path::new("deep/er/x.txt"), Existing::Truncate).unwrap();
        file.write_all(b"x").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("deep/er/x.txt")).unwrap(),
            "x"
        );
        let err = create_file(&root, Path::new("deep/er/x.txt"), Existing::Refuse).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            list(&root, Path::new(".")).unwrap(),
            ["deep/", "inbox", "s.txt", "sub/"]
        );
    }
}
