//! Request decoding and validation: any body for any route's decoder either
//! decodes and validates, or is refused with 400 `invalid_argument` or 413
//! `payload_too_large` — never a panic, never another status.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tether_server::fuzzing::{decode_and_validate, ROUTES};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let route = ROUTES[usize::from(pick) % ROUTES.len()];
    if let Err(e) = decode_and_validate(route, body) {
        let status = e.status.as_u16();
        assert!(
            status == 400 || status == 413,
            "{route}: {status} {} {}",
            e.code,
            e.message
        );
    }
});
