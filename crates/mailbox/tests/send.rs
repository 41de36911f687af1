//! Positive checks that complement the `compile_fail` doctests (which show
//! the handles are neither `Sync` nor `Clone`): the handles are `Send` and
//! the errors are ordinary thread-safe error values.

use std::num::NonZeroU64;

use pspat_mailbox::{mailbox, CapacityError, Consumer, Full, Producer};

fn assert_send<T: Send>() {}
fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}

#[test]
fn handles_are_send() {
    assert_send::<Producer<NonZeroU64>>();
    assert_send::<Consumer<NonZeroU64>>();
}

#[test]
fn errors_are_send_sync_errors() {
    assert_error::<CapacityError>();
    assert_error::<Full<NonZeroU64>>();
}

/// Each handle moves to its own thread and back.
#[test]
fn handles_move_between_threads() {
    let (tx, rx) = mailbox::<NonZeroU64>(64).unwrap();
    let mut tx = std::thread::spawn(move || {
        let mut tx = tx;
        tx.push(NonZeroU64::new(7).unwrap()).unwrap();
        tx
    })
    .join()
    .unwrap();
    let mut rx = std::thread::spawn(move || {
        let mut rx = rx;
        assert_eq!(rx.pop(), NonZeroU64::new(7));
        rx.release();
        rx
    })
    .join()
    .unwrap();
    tx.push(NonZeroU64::new(8).unwrap()).unwrap();
    assert_eq!(rx.pop(), NonZeroU64::new(8));
}
