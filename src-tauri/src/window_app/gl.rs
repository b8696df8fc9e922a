//! Keeps GL out of the window's own process when WebKit draws in software.
//!
//! With compositing and the DMA-BUF renderer off (`webkit::prepare`, where no GPU is usable) the web
//! process paints the page into shared memory and the window's process only copies it to the screen:
//! it has no use for GL. Yet two things load Mesa's driver in it, and with the driver Mesa's LLVM (44
//! MiB resident, 8 of them private, measured with `smaps`): GDK picks its X visuals through GLX when
//! the display opens, and WebKit opens an EGL display before it starts its web process. Here:
//!
//! * GDK is told not to use GL (`GDK_GL=disable`), unless the user set `GDK_GL`.
//! * libglvnd, the EGL loader, is made to settle on no vendor in this process: it reads
//!   `__EGL_VENDOR_LIBRARY_FILENAMES` once, the first time EGL is used, so this process points it
//!   at a file that does not exist, uses EGL once, and puts the variable back as it was. WebKit then
//!   finds no EGL display in the window's process (and falls back to the shared-memory path it
//!   already takes) while its web process, started later with the environment as it was, loads
//!   Mesa as before and draws the page.
//!
//! The window's process and its web process then hold 18 to 25 MiB less together (the window's
//! process loses the driver and LLVM, the web process no longer shares their pages with it).

use std::ffi::{c_char, c_int, c_void, CStr};

/// libglvnd's list of EGL vendor files, read once per process.
const VENDORS: &str = "__EGL_VENDOR_LIBRARY_FILENAMES";
/// A vendor file that cannot exist (`/dev/null` is not a directory).
const NO_VENDOR: &str = "/dev/null/keymux-no-egl-vendor.json";
/// `EGL_EXTENSIONS`, queried on `EGL_NO_DISPLAY`: the one call that makes libglvnd load its vendors.
const EGL_EXTENSIONS: c_int = 0x3055;

/// Keeps GDK and EGL from loading a GL driver in this process. Call on the main thread before any
/// other thread starts and before GTK is initialised.
pub fn leave_to_the_web_process() {
    if std::env::var_os("GDK_GL").is_none() {
        // Edition 2021: `set_var` is safe; no other thread runs yet (see above).
        std::env::set_var("GDK_GL", "disable");
    }
    let before = std::env::var_os(VENDORS);
    std::env::set_var(VENDORS, NO_VENDOR);
    let settled = settle_egl();
    match before {
        Some(value) => std::env::set_var(VENDORS, value),
        None => std::env::remove_var(VENDORS),
    }
    if settled {
        tracing::debug!("the window's process uses no GL: WebKit's web process draws the page");
    } else {
        tracing::debug!("no EGL loader here: nothing to keep out");
    }
}

/// Loads libglvnd's `libEGL.so.1` (which WebKit loads later through libepoxy, getting this same
/// instance) and makes it read its vendors now. Whether the loader was there.
#[allow(unsafe_code)]
fn settle_egl() -> bool {
    const LIBRARY: &CStr = c"libEGL.so.1";
    const QUERY: &CStr = c"eglQueryString";
    // SAFETY: `dlopen` and `dlsym` get NUL-terminated names; the handle is kept for the process's
    // life (never closed), so the symbol stays valid. `eglQueryString(EGL_NO_DISPLAY,
    // EGL_EXTENSIONS)` has this signature in EGL 1.5 and takes no pointer from us; its result is
    // only compared with null.
    unsafe {
        let library = libc::dlopen(LIBRARY.as_ptr(), libc::RTLD_NOW);
        if library.is_null() {
            return false;
        }
        let query = libc::dlsym(library, QUERY.as_ptr());
        if query.is_null() {
            return false;
        }
        let query: extern "C" fn(*mut c_void, c_int) -> *const c_char = std::mem::transmute(query);
        let _ = query(std::ptr::null_mut(), EGL_EXTENSIONS);
    }
    true
}
