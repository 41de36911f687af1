//! A node: several links, one [`Runtime`] (arbiter) per link, flows sharded
//! over the links by weighted Highest Random Weight (Guo's dissertation,
//! `docs/REFERENCE.md` §7; the weights are the links' rates).
//!
//! A [`NodeClient`] holds one [`Client`] per link and submits each packet
//! to its flow's link. Links can be added and removed while traffic flows.
//!
//! # Guarantees
//! * **Placement.** A flow's link is its weighted-HRW winner among the
//!   active links (logarithmic form: link `j` gets a fraction `rate_j /
//!   Σ rate` of the flows). Adding a link moves to it only the flows it now
//!   wins, about `rate_new / Σ rate` of them (1/(K+1) for equal rates);
//!   removing one moves only its own flows.
//! * **Order: flows move at flowlet boundaries.** A flow whose winner
//!   changed keeps using its old link until the client has nothing in flight
//!   there ([`Client::in_flight`] is 0: every packet it submitted on that
//!   link was transmitted or dropped), so a flow's packets are never
//!   reordered by a move. The boundary is the client's, not the flow's (a
//!   client cannot tell which of its packets on a link have left, only
//!   whether all have): a client that keeps its old link busy with other
//!   flows moves its flows at its next pause there.
//! * **Conservation.** Each link is a [`Runtime`] with its own counters:
//!   `submitted = transmitted + dropped + in_flight` per link, and after
//!   [`Node::shutdown`] for every link. A removed link keeps running until
//!   every node client has dropped its handle to it (each does so at its
//!   first call after the removal at which it has nothing in flight there),
//!   then [`Node::reap`] or [`Node::shutdown`] shuts it down and returns its
//!   final statistics.
//!
//! # Cost
//! Per packet: one Acquire load of the membership epoch and two table
//! slots (the flow's current and winning link; 2^12 slots indexed by
//! `flow % 2^12`, and the slot index is what HRW hashes, so flows sharing a
//! slot are placed and moved together). A weighted-HRW decision (O(K)) is
//! made for a slot's first packet; a membership change costs each client
//! one lock of the node's link list and 2^12 decisions at its next call.

use std::sync::{Arc, Mutex, MutexGuard};

use pspat_sched::place::{FlowDigest, WeightForm, WeightedHrw};
use pspat_sched::{FlowId, Scheduler};

use crate::runtime::{Finished, TxOwner};
use crate::sync::{AtomicU64, Ordering};
use crate::{
    Accepted, Client, Runtime, RuntimeConfig, RuntimeError, Submission, SubmitError, TxBackend,
};

/// A link's id in a [`Node`]: stable for the node's life, never reused.
pub type LinkId = u32;

/// Slots of a node client's flow table.
const FLOW_SLOTS: usize = 1 << 12;
const UNPLACED: u32 = u32::MAX;

struct Link<B: TxBackend> {
    id: LinkId,
    /// Weight for placement (the link rate in bit/s, or 1 Gbit/s when
    /// unlimited).
    weight: f64,
    runtime: Option<Runtime<B>>,
    removed: bool,
    /// Node clients holding a handle to this link.
    holders: usize,
}

struct Links<B: TxBackend> {
    list: Vec<Link<B>>,
    next_id: LinkId,
}

struct NodeShared<B: TxBackend> {
    /// Bumped (Release) after every membership change made under `links`.
    epoch: AtomicU64,
    links: Mutex<Links<B>>,
}

impl<B: TxBackend> NodeShared<B> {
    fn lock(&self) -> MutexGuard<'_, Links<B>> {
        // A poisoned list is still consistent: every change under the lock
        // is a single push or field store.
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Several links, one runtime each, flows placed by weighted HRW.
///
/// # Examples
/// ```
/// use pspat::{NullTx, RuntimeConfig, Submission};
/// use pspat::node::Node;
/// use pspat_sched::{AlgKind, FlowId, FlowTable, SchedulerConfig};
///
/// let sched = || SchedulerConfig::new(AlgKind::Drr).build(FlowTable::uniform(64).unwrap()).unwrap();
/// let node = Node::new();
/// let a = node.add_link(RuntimeConfig::default(), sched(), |_| NullTx::new()).unwrap();
/// let b = node.add_link(RuntimeConfig::default(), sched(), |_| NullTx::new()).unwrap();
/// let mut client = node.client();
/// for f in 0..64 {
///     let s = Submission { flow: FlowId(f), len: 60, cookie: 0, ect: false };
///     while client.submit(s).is_err() {
///         std::thread::yield_now();
///     }
/// }
/// drop(client);
/// let done = node.shutdown().unwrap();
/// let sent: u64 = done.iter().map(|(_, f)| f.stats.transmitted).sum();
/// assert_eq!(sent, 64);
/// assert!(done.iter().all(|(_, f)| f.stats.transmitted > 0), "both links carry flows ({a}, {b})");
/// ```
pub struct Node<B: TxBackend> {
    shared: Arc<NodeShared<B>>,
}

impl<B: TxBackend> Default for Node<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: TxBackend> Node<B> {
    /// A node with no link yet.
    pub fn new() -> Self {
        Node {
            shared: Arc::new(NodeShared {
                epoch: AtomicU64::new(0),
                links: Mutex::new(Links {
                    list: Vec::new(),
                    next_id: 0,
                }),
            }),
        }
    }

    /// Starts a link (its own runtime: arbiter, dispatchers) and places
    /// flows on it from every client's next call.
    ///
    /// # Errors
    /// As [`Runtime::start`].
    pub fn add_link<S, F>(
        &self,
        cfg: RuntimeConfig,
        sched: S,
        factory: F,
    ) -> Result<LinkId, RuntimeError>
    where
        S: Scheduler + Send + 'static,
        F: FnMut(TxOwner) -> B + Send + 'static,
    {
        let weight = cfg.rate_bps.unwrap_or(1_000_000_000) as f64;
        let runtime = Runtime::start(cfg, sched, factory)?;
        let mut links = self.shared.lock();
        let id = links.next_id;
        links.next_id += 1;
        links.list.push(Link {
            id,
            weight,
            runtime: Some(runtime),
            removed: false,
            holders: 0,
        });
        drop(links);
        // Release: pairs with the clients' Acquire load in `refresh_if_needed`.
        self.shared.epoch.fetch_add(1, Ordering::Release);
        Ok(id)
    }

    /// Stops placing flows on `link`: its flows move to the other links at
    /// their flowlet boundaries. The link's runtime runs until every client
    /// has let go of it; [`Node::reap`] then shuts it down.
    ///
    /// # Errors
    /// [`RuntimeError::Invalid`] for an unknown or already removed link.
    pub fn remove_link(&self, link: LinkId) -> Result<(), RuntimeError> {
        let mut links = self.shared.lock();
        let l = links
            .list
            .iter_mut()
            .find(|l| l.id == link && !l.removed)
            .ok_or_else(|| RuntimeError::invalid("link", format!("no active link {link}")))?;
        l.removed = true;
        drop(links);
        self.shared.epoch.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Active links (not removed), by id.
    pub fn links(&self) -> Vec<LinkId> {
        let links = self.shared.lock();
        links
            .list
            .iter()
            .filter(|l| !l.removed)
            .map(|l| l.id)
            .collect()
    }

    /// A client with a handle to every active link (created lazily).
    pub fn client(&self) -> NodeClient<B> {
        NodeClient {
            node: Arc::clone(&self.shared),
            epoch: u64::MAX,
            placer: None,
            active: Vec::new(),
            handles: Vec::new(),
            current: vec![UNPLACED; FLOW_SLOTS].into_boxed_slice(),
            target: vec![UNPLACED; FLOW_SLOTS].into_boxed_slice(),
        }
    }

    /// Shuts down every removed link that no client holds any more and
    /// returns their final statistics.
    ///
    /// # Errors
    /// As [`Runtime::shutdown`] (the other links are still reaped).
    pub fn reap(&self) -> Result<Vec<(LinkId, Finished<B>)>, RuntimeError> {
        let taken: Vec<(LinkId, Runtime<B>)> = {
            let mut links = self.shared.lock();
            let mut out = Vec::new();
            for l in links
                .list
                .iter_mut()
                .filter(|l| l.removed && l.holders == 0)
            {
                if let Some(rt) = l.runtime.take() {
                    out.push((l.id, rt));
                }
            }
            out
        };
        finish_all(taken)
    }

    /// Shuts down every link (drop every [`NodeClient`] first, as with
    /// [`Runtime::shutdown`]) and returns their final statistics by link.
    ///
    /// # Errors
    /// As [`Runtime::shutdown`].
    pub fn shutdown(self) -> Result<Vec<(LinkId, Finished<B>)>, RuntimeError> {
        let taken: Vec<(LinkId, Runtime<B>)> = {
            let mut links = self.shared.lock();
            links
                .list
                .iter_mut()
                .filter_map(|l| l.runtime.take().map(|rt| (l.id, rt)))
                .collect()
        };
        finish_all(taken)
    }
}

fn finish_all<B: TxBackend>(
    taken: Vec<(LinkId, Runtime<B>)>,
) -> Result<Vec<(LinkId, Finished<B>)>, RuntimeError> {
    let mut out = Vec::with_capacity(taken.len());
    let mut first_error = None;
    for (id, rt) in taken {
        match rt.shutdown() {
            Ok(f) => out.push((id, f)),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// A handle to one link held by a node client.
struct Handle<B: TxBackend> {
    link: LinkId,
    client: Client<B>,
    /// The link was removed: drop the handle once nothing is in flight and
    /// no flow slot points here.
    removed: bool,
}

/// Submits packets to a [`Node`], each to its flow's link. `Send`, not
/// `Sync`: one thread submits.
pub struct NodeClient<B: TxBackend> {
    node: Arc<NodeShared<B>>,
    /// The membership epoch `active`/`placer` were built from.
    epoch: u64,
    /// Weighted HRW over the active links (positions index `active`).
    placer: Option<WeightedHrw>,
    /// Active link ids, in the placer's order.
    active: Vec<LinkId>,
    handles: Vec<Handle<B>>,
    /// Per flow slot: the link its packets go to now.
    current: Box<[LinkId]>,
    /// Per flow slot: its winner among the active links (where it moves at
    /// its next flowlet boundary).
    target: Box<[LinkId]>,
}

impl<B: TxBackend> NodeClient<B> {
    /// Submits one packet on its flow's link.
    ///
    /// # Errors
    /// [`SubmitError`] as [`Client::submit`], handing the packet back;
    /// [`SubmitError::Closed`] when the node has no active link.
    pub fn submit(&mut self, s: Submission) -> Result<Accepted, SubmitError> {
        self.refresh_if_needed();
        if self.placer.is_none() {
            return Err(SubmitError::Closed(s));
        }
        let slot = s.flow.index() % FLOW_SLOTS;
        if self.target[slot] == UNPLACED {
            self.target[slot] = self.decide(slot);
        }
        let (want, now) = (self.target[slot], self.current[slot]);
        let link = if now == UNPLACED || now == want {
            want
        } else {
            // The winner changed: move only at a flowlet boundary.
            let busy = self
                .handle_mut(now)
                .is_some_and(|h| h.client.in_flight() > 0);
            if busy {
                now
            } else {
                want
            }
        };
        self.current[slot] = link;
        let Some(h) = self.handle_mut(link) else {
            return Err(SubmitError::Closed(s));
        };
        let r = h.client.submit(s);
        if link != now && now != UNPLACED {
            self.release_removed();
        }
        r
    }

    /// The winning active link of a flow slot.
    fn decide(&self, slot: usize) -> LinkId {
        match self.placer.as_ref() {
            Some(p) => self.active[p.decide(FlowDigest::of_u64(slot as u64))],
            None => UNPLACED,
        }
    }

    /// Waits until the link of `flow` has room (see
    /// [`Client::wait_for_room`]).
    pub fn wait_for_room(&mut self, flow: FlowId, timeout: std::time::Duration) -> bool {
        let link = self.current[flow.index() % FLOW_SLOTS];
        match self.handle_mut(link) {
            Some(h) => h.client.wait_for_room(timeout),
            None => {
                std::thread::yield_now();
                true
            }
        }
    }

    /// The link `flow`'s packets go to now (`None` before its first packet
    /// or after its link was let go).
    pub fn link_of(&self, flow: FlowId) -> Option<LinkId> {
        Some(self.current[flow.index() % FLOW_SLOTS]).filter(|&l| l != UNPLACED)
    }

    /// The link `flow` is placed on by the current membership: where its
    /// packets go from its next flowlet boundary (`None` before its first
    /// packet).
    pub fn target_of(&self, flow: FlowId) -> Option<LinkId> {
        Some(self.target[flow.index() % FLOW_SLOTS]).filter(|&l| l != UNPLACED)
    }

    /// Links this client holds a handle to (active and removed ones still
    /// draining), by id.
    pub fn held_links(&self) -> Vec<LinkId> {
        self.handles.iter().map(|h| h.link).collect()
    }

    fn handle_mut(&mut self, link: LinkId) -> Option<&mut Handle<B>> {
        self.handles.iter_mut().find(|h| h.link == link)
    }

    /// Rebuilds the placement and the handles after a membership change.
    fn refresh_if_needed(&mut self) {
        // Acquire: pairs with the Release bump after a change, so the list
        // read under the lock below shows that change (the lock orders it
        // anyway; the load only avoids taking the lock per packet).
        let epoch = self.node.epoch.load(Ordering::Acquire);
        if epoch == self.epoch {
            return;
        }
        let node = Arc::clone(&self.node);
        let mut links = node.lock();
        self.epoch = epoch;
        let mut ids = Vec::new();
        let mut weights = Vec::new();
        for l in links.list.iter_mut() {
            if l.removed {
                if let Some(h) = self.handles.iter_mut().find(|h| h.link == l.id) {
                    h.removed = true;
                }
                continue;
            }
            ids.push(l.id);
            weights.push(l.weight);
            if self.handles.iter().any(|h| h.link == l.id) {
                continue;
            }
            if let Some(client) = l.runtime.as_ref().and_then(|rt| rt.client().ok()) {
                l.holders += 1;
                self.handles.push(Handle {
                    link: l.id,
                    client,
                    removed: false,
                });
            }
        }
        drop(links);
        self.placer = WeightedHrw::new(ids.clone(), &weights, WeightForm::Logarithmic).ok();
        self.active = ids;
        for slot in 0..FLOW_SLOTS {
            if self.target[slot] != UNPLACED {
                self.target[slot] = self.decide(slot);
            }
        }
        self.release_removed();
    }

    /// Drops handles to removed links with nothing in flight; flow slots
    /// still pointing there are placed afresh at their next packet (safe:
    /// nothing of theirs is in flight).
    fn release_removed(&mut self) {
        let mut i = 0;
        while i < self.handles.len() {
            let h = &mut self.handles[i];
            let link = h.link;
            if !(h.removed && h.client.in_flight() == 0) {
                i += 1;
                continue;
            }
            let h = self.handles.swap_remove(i);
            drop(h.client);
            for c in self.current.iter_mut().filter(|c| **c == link) {
                *c = UNPLACED;
            }
            let mut links = self.node.lock();
            if let Some(l) = links.list.iter_mut().find(|l| l.id == link) {
                l.holders -= 1;
            }
        }
    }
}

impl<B: TxBackend> Drop for NodeClient<B> {
    fn drop(&mut self) {
        let held: Vec<LinkId> = self.handles.drain(..).map(|h| h.link).collect();
        let mut links = self.node.lock();
        for id in held {
            if let Some(l) = links.list.iter_mut().find(|l| l.id == id) {
                l.holders = l.holders.saturating_sub(1);
            }
        }
    }
}
