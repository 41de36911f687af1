//! The live switch of a shaped reverse direction: shaped now, or
//! forwarded unshaped ([`ReverseSwitch`]). One atomic flag read for each
//! frame by each reverse RX thread, and a count of its changes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Whether a shaped reverse direction ([`crate::BridgeConfig::shape_reverse`])
/// shapes now, or forwards its frames unshaped; shared by the bridge's
/// reverse RX threads and whoever turns it on and off
/// ([`crate::BridgeConfig::reverse_switch`]). Clones share the switch.
///
/// Each reverse RX thread reads it for every frame: a change applies to
/// every frame read after it, even one a thread waited for since before
/// (one load on the frame's path). Frames already in the runtime
/// when it turns off are still scheduled and sent; frames forwarded
/// unshaped are counted with the direction's others
/// ([`crate::ReverseReport`]).
#[derive(Clone, Debug)]
pub struct ReverseSwitch(Arc<SwitchState>);

#[derive(Debug)]
struct SwitchState {
    shaped: AtomicBool,
    toggles: AtomicU64,
}

impl ReverseSwitch {
    /// A switch starting shaped (`true`) or unshaped.
    pub fn new(shaped: bool) -> Self {
        ReverseSwitch(Arc::new(SwitchState {
            shaped: AtomicBool::new(shaped),
            toggles: AtomicU64::new(0),
        }))
    }

    /// Whether the reverse direction is shaped now.
    pub fn shaped(&self) -> bool {
        // Acquire: pairs with the Release of `set`; what the setter wrote
        // before turning it (a new classifier) is seen by a thread that
        // sees the new mode.
        self.0.shaped.load(Ordering::Acquire)
    }

    /// Shapes the reverse direction (`true`) or forwards it unshaped;
    /// returns whether that changed the mode (each change is counted,
    /// [`ReverseSwitch::toggles`]).
    pub fn set(&self, shaped: bool) -> bool {
        // AcqRel: Release pairs with the Acquire of `shaped`; Acquire orders
        // it after an earlier `set` from another thread.
        let changed = self.0.shaped.swap(shaped, Ordering::AcqRel) != shaped;
        if changed {
            // Relaxed: a count for the report, it orders nothing.
            self.0.toggles.fetch_add(1, Ordering::Relaxed);
        }
        changed
    }

    /// How many times [`ReverseSwitch::set`] changed the mode.
    pub fn toggles(&self) -> u64 {
        // Relaxed: as in `set`.
        self.0.toggles.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_counts_the_changes_only() {
        let s = ReverseSwitch::new(false);
        let other = s.clone();
        assert!(!s.shaped());
        assert!(!s.set(false), "no change");
        assert!(other.set(true));
        assert!(s.shaped(), "clones share the switch");
        assert!(!s.set(true));
        assert!(s.set(false));
        assert_eq!((s.toggles(), other.toggles()), (2, 2));
        assert!(!ReverseSwitch::new(false).shaped());
        assert!(ReverseSwitch::new(true).shaped());
    }
}
