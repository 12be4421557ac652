//! The part of librdkafka's C API (rdkafka.h, stable since 0.11) the plugin calls. The symbols
//! are resolved when librdkafka loads the plugin, against the librdkafka that loads it.

use std::ffi::{c_char, c_int, c_void};

pub const CONF_UNKNOWN: c_int = -2;
pub const CONF_INVALID: c_int = -1;
pub const CONF_OK: c_int = 0;
pub const RESP_ERR_NO_ERROR: c_int = 0;
/// RD_KAFKA_RESP_ERR__INVALID_ARG
pub const RESP_ERR_INVALID_ARG: c_int = -186;

#[repr(C)]
pub struct Conf {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Client {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Topic {
    _opaque: [u8; 0],
}

/// rd_kafka_message_t
#[repr(C)]
pub struct Message {
    pub err: c_int,
    pub rkt: *mut Topic,
    pub partition: i32,
    pub payload: *mut c_void,
    pub len: usize,
    pub key: *mut c_void,
    pub key_len: usize,
    pub offset: i64,
    pub private: *mut c_void,
}

pub type OnConfSet = unsafe extern "C" fn(
    conf: *mut Conf,
    name: *const c_char,
    val: *const c_char,
    errstr: *mut c_char,
    errstr_size: usize,
    ic_opaque: *mut c_void,
) -> c_int;
pub type OnConfDup = unsafe extern "C" fn(
    new_conf: *mut Conf,
    old_conf: *const Conf,
    filter_cnt: usize,
    filter: *const *const c_char,
    ic_opaque: *mut c_void,
) -> c_int;
pub type OnConfDestroy = unsafe extern "C" fn(ic_opaque: *mut c_void) -> c_int;
pub type OnNew = unsafe extern "C" fn(
    rk: *mut Client,
    conf: *const Conf,
    ic_opaque: *mut c_void,
    errstr: *mut c_char,
    errstr_size: usize,
) -> c_int;
pub type OnDestroy = unsafe extern "C" fn(rk: *mut Client, ic_opaque: *mut c_void) -> c_int;
pub type OnMessage =
    unsafe extern "C" fn(rk: *mut Client, message: *mut Message, ic_opaque: *mut c_void) -> c_int;

extern "C" {
    pub fn rd_kafka_conf_interceptor_add_on_conf_set(
        conf: *mut Conf,
        ic_name: *const c_char,
        f: OnConfSet,
        ic_opaque: *mut c_void,
    ) -> c_int;
    pub fn rd_kafka_conf_interceptor_add_on_conf_dup(
        conf: *mut Conf,
        ic_name: *const c_char,
        f: OnConfDup,
        ic_opaque: *mut c_void,
    ) -> c_int;
    pub fn rd_kafka_conf_interceptor_add_on_conf_destroy(
        conf: *mut Conf,
        ic_name: *const c_char,
        f: OnConfDestroy,
        ic_opaque: *mut c_void,
    ) -> c_int;
    pub fn rd_kafka_conf_interceptor_add_on_new(
        conf: *mut Conf,
        ic_name: *const c_char,
        f: OnNew,
        ic_opaque: *mut c_void,
    ) -> c_int;
    pub fn rd_kafka_interceptor_add_on_destroy(
        rk: *mut Client,
        ic_name: *const c_char,
        f: OnDestroy,
        ic_opaque: *mut c_void,
    ) -> c_int;
    pub fn rd_kafka_interceptor_add_on_acknowledgement(
        rk: *mut Client,
        ic_name: *const c_char,
        f: OnMessage,
        ic_opaque: *mut c_void,
    ) -> c_int;
    pub fn rd_kafka_interceptor_add_on_consume(
        rk: *mut Client,
        ic_name: *const c_char,
        f: OnMessage,
        ic_opaque: *mut c_void,
    ) -> c_int;
    pub fn rd_kafka_message_timestamp(message: *const Message, tstype: *mut c_int) -> i64;
    pub fn rd_kafka_topic_name(rkt: *const Topic) -> *const c_char;
}
