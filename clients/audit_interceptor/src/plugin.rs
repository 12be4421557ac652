//! librdkafka's side: `conf_init`, the configuration property that picks a tally, and the
//! interceptors that feed it.
//!
//! Lifetimes: each rd_kafka_conf_t gets a boxed [`ConfState`] (freed by on_conf_destroy; a
//! duplicated conf gets its own copy). A client created from a conf that names a tally holds an
//! `Arc<Tally>` until its on_destroy, so closing the tally on the Python side never frees what a
//! librdkafka thread still uses.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::api::find_tally;
use crate::ffi;
use crate::tally::Tally;

/// The configuration property naming the tally a client counts into.
pub const TALLY_PROPERTY: &str = "uatu.audit.tally";
const IC_NAME: &CStr = c"uatu-audit";

#[derive(Clone, Default)]
struct ConfState {
    tally: Option<Arc<Tally>>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

unsafe fn write_error(errstr: *mut c_char, size: usize, message: &str) {
    if errstr.is_null() || size == 0 {
        return;
    }
    let bytes = message.as_bytes();
    let n = bytes.len().min(size - 1);
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), errstr as *mut u8, n);
    *errstr.add(n) = 0;
}

unsafe fn add_conf_interceptors(conf: *mut ffi::Conf, state: Box<ConfState>) -> c_int {
    let opaque = Box::into_raw(state) as *mut c_void;
    let name = IC_NAME.as_ptr();
    for err in [
        ffi::rd_kafka_conf_interceptor_add_on_conf_set(conf, name, on_conf_set, opaque),
        ffi::rd_kafka_conf_interceptor_add_on_conf_dup(conf, name, on_conf_dup, opaque),
        ffi::rd_kafka_conf_interceptor_add_on_conf_destroy(conf, name, on_conf_destroy, opaque),
        ffi::rd_kafka_conf_interceptor_add_on_new(conf, name, on_new, opaque),
    ] {
        if err != ffi::RESP_ERR_NO_ERROR {
            return err;
        }
    }
    ffi::RESP_ERR_NO_ERROR
}

/// Called by librdkafka when `plugin.library.paths` names this library.
///
/// # Safety
/// Called by librdkafka with a valid conf and error buffer.
#[no_mangle]
pub unsafe extern "C" fn conf_init(
    conf: *mut ffi::Conf,
    _plug_opaquep: *mut *mut c_void,
    errstr: *mut c_char,
    errstr_size: usize,
) -> c_int {
    let err = add_conf_interceptors(conf, Box::default());
    if err != ffi::RESP_ERR_NO_ERROR {
        write_error(
            errstr,
            errstr_size,
            "uatu-audit: could not add its interceptors",
        );
    }
    err
}

unsafe extern "C" fn on_conf_set(
    _conf: *mut ffi::Conf,
    name: *const c_char,
    val: *const c_char,
    errstr: *mut c_char,
    errstr_size: usize,
    ic_opaque: *mut c_void,
) -> c_int {
    if name.is_null() || CStr::from_ptr(name).to_bytes() != TALLY_PROPERTY.as_bytes() {
        return ffi::CONF_UNKNOWN;
    }
    let state = &mut *(ic_opaque as *mut ConfState);
    let id = if val.is_null() {
        ""
    } else {
        CStr::from_ptr(val).to_str().unwrap_or("")
    };
    match find_tally(id) {
        Some(tally) => {
            state.tally = Some(tally);
            ffi::CONF_OK
        }
        None => {
            let message = format!(
                "{TALLY_PROPERTY}={id:?}: no such tally (create it first with uatu_tally_create)"
            );
            write_error(errstr, errstr_size, &message);
            ffi::CONF_INVALID
        }
    }
}

unsafe extern "C" fn on_conf_dup(
    new_conf: *mut ffi::Conf,
    _old_conf: *const ffi::Conf,
    _filter_cnt: usize,
    _filter: *const *const c_char,
    ic_opaque: *mut c_void,
) -> c_int {
    let state = &*(ic_opaque as *const ConfState);
    add_conf_interceptors(new_conf, Box::new(state.clone()))
}

unsafe extern "C" fn on_conf_destroy(ic_opaque: *mut c_void) -> c_int {
    drop(Box::from_raw(ic_opaque as *mut ConfState));
    ffi::RESP_ERR_NO_ERROR
}

unsafe extern "C" fn on_new(
    rk: *mut ffi::Client,
    _conf: *const ffi::Conf,
    ic_opaque: *mut c_void,
    errstr: *mut c_char,
    errstr_size: usize,
) -> c_int {
    let state = &*(ic_opaque as *const ConfState);
    let Some(tally) = state.tally.clone() else {
        let message = format!("uatu-audit plugin loaded but {TALLY_PROPERTY} is not set (set it after plugin.library.paths)");
        write_error(errstr, errstr_size, &message);
        return ffi::RESP_ERR_INVALID_ARG;
    };
    let opaque = Arc::into_raw(tally) as *mut c_void;
    let name = IC_NAME.as_ptr();
    // A client is either a producer or a consumer: only one of the two ever fires.
    for err in [
        ffi::rd_kafka_interceptor_add_on_acknowledgement(rk, name, on_acknowledgement, opaque),
        ffi::rd_kafka_interceptor_add_on_consume(rk, name, on_consume, opaque),
        ffi::rd_kafka_interceptor_add_on_destroy(rk, name, on_destroy, opaque),
    ] {
        if err != ffi::RESP_ERR_NO_ERROR {
            write_error(
                errstr,
                errstr_size,
                "uatu-audit: could not add its client interceptors",
            );
            return err;
        }
    }
    ffi::RESP_ERR_NO_ERROR
}

unsafe extern "C" fn on_destroy(_rk: *mut ffi::Client, ic_opaque: *mut c_void) -> c_int {
    drop(Arc::from_raw(ic_opaque as *const Tally));
    ffi::RESP_ERR_NO_ERROR
}

unsafe fn bytes_of<'a>(ptr: *const c_void, len: usize) -> Option<&'a [u8]> {
    if ptr.is_null() {
        None
    } else {
        Some(std::slice::from_raw_parts(ptr as *const u8, len))
    }
}

unsafe fn count(message: *const ffi::Message, ic_opaque: *mut c_void, acknowledged: bool) {
    let tally = &*(ic_opaque as *const Tally);
    let m = &*message;
    let topic_ptr = ffi::rd_kafka_topic_name(m.rkt);
    let topic = if topic_ptr.is_null() {
        ""
    } else {
        CStr::from_ptr(topic_ptr).to_str().unwrap_or("")
    };
    let now = now_ms();
    let mut tstype: c_int = 0;
    let stamped = ffi::rd_kafka_message_timestamp(message, &mut tstype);
    let timestamp = if stamped > 0 { stamped } else { now };
    if m.err != 0 {
        // A failed send; a consumer's error events are not records.
        if acknowledged {
            tally.record_failed(topic, timestamp);
        }
        return;
    }
    let key = bytes_of(m.key, m.key_len);
    let value = bytes_of(m.payload, m.len);
    tally.record(topic, key, value, timestamp, (now - timestamp) as f64);
}

unsafe extern "C" fn on_acknowledgement(
    _rk: *mut ffi::Client,
    message: *mut ffi::Message,
    ic_opaque: *mut c_void,
) -> c_int {
    // A panic must not unwind into librdkafka; the record is then not counted, which the audit
    // shows as a difference rather than a crashed client.
    let _ = catch_unwind(AssertUnwindSafe(|| count(message, ic_opaque, true)));
    ffi::RESP_ERR_NO_ERROR
}

unsafe extern "C" fn on_consume(
    _rk: *mut ffi::Client,
    message: *mut ffi::Message,
    ic_opaque: *mut c_void,
) -> c_int {
    let _ = catch_unwind(AssertUnwindSafe(|| count(message, ic_opaque, false)));
    ffi::RESP_ERR_NO_ERROR
}
