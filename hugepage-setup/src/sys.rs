//! The real machine behind [`System`]: file reads and writes under a root, `mount(2)` for
//! hugetlbfs and the effective uid. The crate's only `unsafe` (two libc calls) lives here.

use std::io;
use std::path::{Path, PathBuf};

use crate::{PageSize, System};

/// The real machine (with `root` = "/"), or a tree under another root.
#[derive(Debug, Clone)]
pub struct RealSystem {
    /// The file-system root sysfs paths are relative to.
    pub root: PathBuf,
}

impl System for RealSystem {
    fn read(&self, rel: &Path) -> io::Result<String> {
        std::fs::read_to_string(self.root.join(rel))
    }

    fn write(&mut self, rel: &Path, value: &str) -> io::Result<()> {
        std::fs::write(self.root.join(rel), value)
    }

    fn mount_hugetlbfs(&mut self, target: &Path, size: PageSize) -> io::Result<()> {
        let target = self.root.join(target.strip_prefix("/").unwrap_or(target));
        std::fs::create_dir_all(&target)?;
        let c = |s: &str| {
            std::ffi::CString::new(s).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        };
        let (src, tgt, fs) = (c("nodev")?, c(&target.to_string_lossy())?, c("hugetlbfs")?);
        let opts = c(&format!("pagesize={}", size.short()))?;
        // SAFETY: all four pointers are valid NUL-terminated strings that outlive the call;
        // mount(2) reads them only during the call.
        let ret = unsafe {
            libc::mount(
                src.as_ptr(),
                tgt.as_ptr(),
                fs.as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn is_root(&self) -> bool {
        // SAFETY: geteuid cannot fail and touches no memory.
        let uid = unsafe { libc::geteuid() };
        uid == 0
    }
}
