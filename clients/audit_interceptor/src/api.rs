//! The C functions the Python side calls through ctypes: create a tally, drain it, close it.
//! Tallies live in a process-wide registry keyed by an id the caller chooses (a UUID).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::sync::{Arc, Mutex, OnceLock};

use crate::tally::{encode, Tally};

pub const OK: c_int = 0;
pub const ERR_INVALID: c_int = -1;
pub const ERR_EXISTS: c_int = -2;
pub const ERR_UNKNOWN: c_int = -3;

fn registry() -> &'static Mutex<HashMap<String, Arc<Tally>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Arc<Tally>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

pub fn find_tally(id: &str) -> Option<Arc<Tally>> {
    registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(id)
        .cloned()
}

unsafe fn id_of<'a>(id: *const c_char) -> Option<&'a str> {
    if id.is_null() {
        return None;
    }
    CStr::from_ptr(id).to_str().ok().filter(|s| !s.is_empty())
}

/// Create tally `id`: `window_seconds` > 0, `lg_k` in 4..=21. 0, or ERR_INVALID / ERR_EXISTS.
///
/// # Safety
/// `id` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn uatu_tally_create(
    id: *const c_char,
    window_seconds: i64,
    lg_k: c_int,
) -> c_int {
    let Some(id) = id_of(id) else {
        return ERR_INVALID;
    };
    let Ok(lg_k) = u8::try_from(lg_k) else {
        return ERR_INVALID;
    };
    let Ok(tally) = Tally::new(window_seconds, lg_k) else {
        return ERR_INVALID;
    };
    let mut tallies = registry().lock().unwrap_or_else(|p| p.into_inner());
    if tallies.contains_key(id) {
        return ERR_EXISTS;
    }
    tallies.insert(id.to_owned(), Arc::new(tally));
    OK
}

/// Drain tally `id` into a buffer (format: `tally::encode`) that the caller frees with
/// `uatu_buffer_free`. 0, or ERR_UNKNOWN.
///
/// # Safety
/// `id` is a NUL-terminated string; `out` and `out_len` are valid pointers.
#[no_mangle]
pub unsafe extern "C" fn uatu_tally_drain(
    id: *const c_char,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> c_int {
    let Some(tally) = id_of(id).and_then(find_tally) else {
        return ERR_UNKNOWN;
    };
    let bytes = encode(&tally.drain()).into_boxed_slice();
    *out_len = bytes.len();
    *out = Box::into_raw(bytes) as *mut u8;
    OK
}

/// Free a buffer `uatu_tally_drain` returned.
///
/// # Safety
/// `ptr` and `len` are exactly what one `uatu_tally_drain` call returned.
#[no_mangle]
pub unsafe extern "C" fn uatu_buffer_free(ptr: *mut u8, len: usize) {
    if !ptr.is_null() {
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)));
    }
}

/// Forget tally `id`; clients still counting into it keep it until they are destroyed.
///
/// # Safety
/// `id` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn uatu_tally_close(id: *const c_char) -> c_int {
    let Some(id) = id_of(id) else {
        return ERR_INVALID;
    };
    match registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(id)
    {
        Some(_) => OK,
        None => ERR_UNKNOWN,
    }
}
