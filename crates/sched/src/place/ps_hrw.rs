//! Proportional-share HRW (PS-HRW): tenants get shares of the targets in
//! proportion to their demand, through HRW with CARP multipliers.
//!
//! # Source
//! \[H\] Ch. 7 (§7.2, Table 7.1, Theorem 7.1). A tenant (a connection, a
//! request) of demand φ_i (bytes) is due g_i = φ_i/Σφ · N targets. It gets
//! ⌊g_i⌋ targets fully and spreads the residual r = g_i − ⌊g_i⌋: target
//! probabilities are p_j = 1/N' on the allocated targets and r/N' on the
//! others, N' = ⌊g⌋ + (N − ⌊g⌋)·r. A packet of the tenant goes to
//! `argmax_j x_j·u_j`, u_j the packet's HRW weight scaled to (0, 1) and x the
//! multipliers of Theorem 7.1, which make target j win exactly p_j of the
//! packets when the u_j are i.i.d. uniform.
//!
//! # Choices
//! * The allocated targets are the tenant's top ⌊g⌋ HRW ranks (its digest's
//!   weights, ties to the lowest id): distinct targets, stable under small
//!   demand changes (\[H\] Table 7.1 loops while g > 0, which acts as a ceiling
//!   and can return one target twice).
//! * The scores use the plain HRW weight, not the queue-adjusted one: Theorem
//!   7.1 assumes i.i.d. uniform weights, which AHRW scaling breaks.
//! * A target with p_j = 0 (r = 0) gets multiplier 0 and never wins; the
//!   theorem is applied to the targets with p_j > 0.
//! * Recomputation (\[H\] §7.2, "Discussion"): a tenant's allocation is
//!   recomputed when its demand drifts by more than β (default 16%) from the
//!   demand of its last computation; every tenant is recomputed when a tenant
//!   arrives or leaves, or a target is added or removed. Nothing else
//!   recomputes; [`PsHrw::recomputations`] counts them.
//!
//! # Complexity
//! A decision: O(N) weight evaluations and multiplies, no allocation. A
//! tenant's recomputation: O(N log N), no allocation (scratch kept).
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010.

use super::carp::carp_into;
use super::digest::{unit_weight, weight, FlowDigest};
use super::error::{check_ids, PlaceError};
use super::hrw::argmax_by_score;

/// The default drift threshold β of \[H\] §7.3.1 (16%).
pub const DEFAULT_BETA: f64 = 0.16;

/// A tenant's handle in a [`PsHrw`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TenantId(pub u32);

#[derive(Clone, Debug)]
struct Tenant {
    active: bool,
    digest: FlowDigest,
    demand: f64,
    demand_at_compute: f64,
    full_targets: u32,
}

/// PS-HRW over a fixed-capacity set of tenants and a set of targets.
///
/// # Examples
/// ```
/// use pspat_sched::place::{FlowDigest, PsHrw, DEFAULT_BETA};
/// let mut ps = PsHrw::new(vec![0, 1, 2, 3], 8, DEFAULT_BETA).unwrap();
/// let big = ps.add_tenant(FlowDigest::of_u64(1), 3_000.0).unwrap();
/// let small = ps.add_tenant(FlowDigest::of_u64(2), 1_000.0).unwrap();
/// assert_eq!(ps.full_targets(big).unwrap(), 3); // 3/4 of 4 targets
/// assert!(ps.route(small, FlowDigest::of_u64(77)).unwrap() < 4);
/// // A 10% drift is below β = 16%: nothing is recomputed.
/// assert!(!ps.update_demand(big, 3_300.0).unwrap());
/// ```
#[derive(Clone, Debug)]
pub struct PsHrw {
    ids: Vec<u32>,
    beta: f64,
    tenants: Vec<Tenant>,
    /// Row t: tenant t's multipliers over the targets.
    multipliers: Vec<f64>,
    /// Row t: tenant t's target probabilities.
    probabilities: Vec<f64>,
    order: Vec<usize>,
    recomputations: u64,
}

impl PsHrw {
    /// PS-HRW over targets `ids`, room for `max_tenants`, drift threshold
    /// `beta` (a fraction, e.g. [`DEFAULT_BETA`]).
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`], [`PlaceError::DuplicateTarget`],
    /// [`PlaceError::OutOfRange`] for `max_tenants == 0` or a `beta` that is
    /// negative or not finite.
    pub fn new(ids: Vec<u32>, max_tenants: usize, beta: f64) -> Result<Self, PlaceError> {
        check_ids(&ids)?;
        if max_tenants == 0 || max_tenants > u32::MAX as usize {
            return Err(PlaceError::OutOfRange {
                what: "max_tenants",
                value: max_tenants.to_string(),
                allowed: "1..=4294967295",
            });
        }
        if !(beta.is_finite() && beta >= 0.0) {
            return Err(PlaceError::OutOfRange {
                what: "beta",
                value: beta.to_string(),
                allowed: "finite and >= 0",
            });
        }
        let n = ids.len();
        Ok(PsHrw {
            beta,
            tenants: vec![
                Tenant {
                    active: false,
                    digest: FlowDigest(0),
                    demand: 0.0,
                    demand_at_compute: 0.0,
                    full_targets: 0,
                };
                max_tenants
            ],
            multipliers: vec![0.0; n * max_tenants],
            probabilities: vec![0.0; n * max_tenants],
            order: vec![0; n],
            ids,
            recomputations: 0,
        })
    }

    /// The target ids, in decision order.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Tenant recomputations so far (one per tenant recomputed).
    pub fn recomputations(&self) -> u64 {
        self.recomputations
    }

    /// Adds a tenant keyed by `digest` with `demand` (bytes); every tenant is
    /// recomputed.
    ///
    /// # Errors
    /// [`PlaceError::BadWeight`] for a demand that is not finite and > 0;
    /// [`PlaceError::Full`] when `max_tenants` are active.
    pub fn add_tenant(&mut self, digest: FlowDigest, demand: f64) -> Result<TenantId, PlaceError> {
        check_demand(demand)?;
        let slot = self
            .tenants
            .iter()
            .position(|t| !t.active)
            .ok_or(PlaceError::Full {
                what: "PS-HRW tenant table",
                capacity: self.tenants.len(),
            })?;
        self.tenants[slot] = Tenant {
            active: true,
            digest,
            demand,
            demand_at_compute: demand,
            full_targets: 0,
        };
        self.recompute_all()?;
        Ok(TenantId(slot as u32))
    }

    /// Removes a tenant; every remaining tenant is recomputed.
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for an unknown or inactive tenant.
    pub fn remove_tenant(&mut self, tenant: TenantId) -> Result<(), PlaceError> {
        let t = self.slot(tenant)?;
        self.tenants[t].active = false;
        self.recompute_all()
    }

    /// Records a tenant's new demand; recomputes its allocation only when the
    /// demand drifted by more than β from the last computation's. Returns
    /// whether it recomputed.
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for an unknown tenant;
    /// [`PlaceError::BadWeight`] for a demand that is not finite and > 0.
    pub fn update_demand(&mut self, tenant: TenantId, demand: f64) -> Result<bool, PlaceError> {
        let t = self.slot(tenant)?;
        check_demand(demand)?;
        self.tenants[t].demand = demand;
        let base = self.tenants[t].demand_at_compute;
        if (demand - base).abs() > self.beta * base {
            self.recompute(t)?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Adds a target; every tenant is recomputed.
    ///
    /// # Errors
    /// [`PlaceError::DuplicateTarget`] when `id` is present.
    pub fn add_target(&mut self, id: u32) -> Result<(), PlaceError> {
        if self.ids.contains(&id) {
            return Err(PlaceError::DuplicateTarget { id });
        }
        self.ids.push(id);
        self.resize_targets();
        self.recompute_all()
    }

    /// Removes the target with `id`; every tenant is recomputed.
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] when `id` is absent;
    /// [`PlaceError::NoTargets`] when it is the last one.
    pub fn remove_target(&mut self, id: u32) -> Result<(), PlaceError> {
        let pos = self
            .ids
            .iter()
            .position(|&x| x == id)
            .ok_or(PlaceError::IndexOutOfRange {
                what: "target id",
                index: id as usize,
                len: self.ids.len(),
            })?;
        if self.ids.len() == 1 {
            return Err(PlaceError::NoTargets);
        }
        self.ids.remove(pos);
        self.resize_targets();
        self.recompute_all()
    }

    /// The number of targets the tenant holds fully (⌊g⌋).
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for an unknown tenant.
    pub fn full_targets(&self, tenant: TenantId) -> Result<u32, PlaceError> {
        Ok(self.tenants[self.slot(tenant)?].full_targets)
    }

    /// The tenant's multipliers, by target position.
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for an unknown tenant.
    pub fn multipliers(&self, tenant: TenantId) -> Result<&[f64], PlaceError> {
        let t = self.slot(tenant)?;
        let n = self.ids.len();
        Ok(&self.multipliers[t * n..(t + 1) * n])
    }

    /// The target position for a packet of `tenant` whose flow digest is
    /// `digest`. O(N), no allocation.
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for an unknown tenant.
    pub fn route(&self, tenant: TenantId, digest: FlowDigest) -> Result<usize, PlaceError> {
        let x = self.multipliers(tenant)?;
        Ok(argmax_by_score(&self.ids, |i, id| {
            x[i] * unit_weight(digest, id)
        }))
    }

    fn slot(&self, tenant: TenantId) -> Result<usize, PlaceError> {
        let t = tenant.0 as usize;
        match self.tenants.get(t) {
            Some(x) if x.active => Ok(t),
            _ => Err(PlaceError::IndexOutOfRange {
                what: "tenant",
                index: t,
                len: self.tenants.len(),
            }),
        }
    }

    fn resize_targets(&mut self) {
        let n = self.ids.len();
        self.multipliers = vec![0.0; n * self.tenants.len()];
        self.probabilities = vec![0.0; n * self.tenants.len()];
        self.order = vec![0; n];
    }

    fn recompute_all(&mut self) -> Result<(), PlaceError> {
        for t in 0..self.tenants.len() {
            if self.tenants[t].active {
                self.recompute(t)?;
            }
        }
        Ok(())
    }

    fn recompute(&mut self, t: usize) -> Result<(), PlaceError> {
        self.recomputations += 1;
        let n = self.ids.len();
        let total: f64 = self
            .tenants
            .iter()
            .filter(|x| x.active)
            .map(|x| x.demand)
            .sum();
        let tenant = &mut self.tenants[t];
        tenant.demand_at_compute = tenant.demand;
        let g = (tenant.demand / total * n as f64).min(n as f64);
        let full = (g.floor() as usize).min(n);
        let residual = g - full as f64;
        tenant.full_targets = full as u32;
        let digest = tenant.digest;
        // The tenant's top `full` HRW ranks.
        let ids = &self.ids;
        for (i, o) in self.order.iter_mut().enumerate() {
            *o = i;
        }
        self.order.sort_unstable_by(|&a, &b| {
            weight(digest, ids[b])
                .cmp(&weight(digest, ids[a]))
                .then(ids[a].cmp(&ids[b]))
        });
        let n_prime = full as f64 + (n - full) as f64 * residual;
        let p = &mut self.probabilities[t * n..(t + 1) * n];
        for v in p.iter_mut() {
            *v = residual / n_prime;
        }
        for &j in &self.order[..full] {
            p[j] = 1.0 / n_prime;
        }
        let x = &mut self.multipliers[t * n..(t + 1) * n];
        carp_into(p, &mut self.order, x)
    }

    /// The tenant's last recorded demand (bytes).
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for an unknown tenant.
    pub fn demand(&self, tenant: TenantId) -> Result<f64, PlaceError> {
        Ok(self.tenants[self.slot(tenant)?].demand)
    }

    /// The tenant's target probabilities p_j of its last computation, by
    /// target position (Σ = 1).
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for an unknown tenant.
    pub fn probabilities(&self, tenant: TenantId) -> Result<&[f64], PlaceError> {
        let t = self.slot(tenant)?;
        let n = self.ids.len();
        Ok(&self.probabilities[t * n..(t + 1) * n])
    }
}

fn check_demand(demand: f64) -> Result<(), PlaceError> {
    if demand.is_finite() && demand > 0.0 {
        Ok(())
    } else {
        Err(PlaceError::BadWeight {
            index: 0,
            value: demand,
        })
    }
}
