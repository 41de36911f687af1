//! Typed errors of the placement module: every constructor and every update
//! validates its input and answers with a [`PlaceError`] instead of
//! panicking.

/// Why a placement structure could not be built or updated.
///
/// Messages name the item, the value and what is allowed, so the CLI can print
/// them as they are.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceError {
    /// A placement needs at least one target.
    #[error("no targets: at least one target is needed")]
    NoTargets,
    /// Two targets share one id, so their weights would always tie.
    #[error("target id {id} appears twice: ids must be distinct")]
    DuplicateTarget {
        /// The repeated id.
        id: u32,
    },
    /// A weight (a link rate, a share) is zero, negative or not finite.
    #[error("weight {index} = {value} is invalid: weights must be finite and > 0")]
    BadWeight {
        /// Position of the weight in the list given.
        index: usize,
        /// The value given.
        value: f64,
    },
    /// Weights each valid whose sum is not finite (each near `f64::MAX`).
    #[error("the weights sum to {sum}: their sum must be finite")]
    WeightSum {
        /// The sum.
        sum: f64,
    },
    /// A cost matrix whose shape is not targets × sources.
    #[error("cost matrix is {rows}x{cols}, expected {expected}x{expected} (targets x sources)")]
    CostMatrixSize {
        /// The number of targets (rows and columns expected).
        expected: usize,
        /// Rows given.
        rows: usize,
        /// Columns of the first row of the wrong length (or of the first row).
        cols: usize,
    },
    /// A cost-matrix entry below 1 (or not finite): \[H\] Eq. 6.3 makes every
    /// ratio at least 1.
    #[error(
        "cost matrix entry [{row}][{col}] = {value} is invalid: entries must be finite and >= 1"
    )]
    CostBelowOne {
        /// Row (target).
        row: usize,
        /// Column (source, the flow's home).
        col: usize,
        /// The value given.
        value: f64,
    },
    /// A topology description that does not parse.
    #[error("topology: {what}: {reason}")]
    Topology {
        /// The item at fault (a CPU, a file's text, a field).
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// A tree description that is not a tree of the required shape.
    #[error("tree: {0}")]
    Tree(String),
    /// An index (target, leaf, tenant) beyond the structure's size.
    #[error("{what} {index} is out of range (have {len})")]
    IndexOutOfRange {
        /// What was indexed.
        what: &'static str,
        /// The index given.
        index: usize,
        /// The number of items.
        len: usize,
    },
    /// A scalar parameter outside its allowed range.
    #[error("{what} = {value} is out of range (allowed: {allowed})")]
    OutOfRange {
        /// The parameter.
        what: &'static str,
        /// The value given.
        value: String,
        /// The allowed range.
        allowed: &'static str,
    },
    /// A fixed-capacity table is full.
    #[error("{what} is full ({capacity} entries)")]
    Full {
        /// The table.
        what: &'static str,
        /// Its capacity.
        capacity: usize,
    },
}

/// `Ok` when every weight is finite and strictly positive.
pub(crate) fn check_weights(weights: &[f64]) -> Result<(), PlaceError> {
    if weights.is_empty() {
        return Err(PlaceError::NoTargets);
    }
    match weights
        .iter()
        .enumerate()
        .find(|(_, w)| !(w.is_finite() && **w > 0.0))
    {
        Some((index, &value)) => Err(PlaceError::BadWeight { index, value }),
        None => Ok(()),
    }
}

/// `Ok` when `ids` is non-empty and has no repeated id.
pub(crate) fn check_ids(ids: &[u32]) -> Result<(), PlaceError> {
    if ids.is_empty() {
        return Err(PlaceError::NoTargets);
    }
    // Construction time only: a sorted copy is fine.
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    match sorted.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(PlaceError::DuplicateTarget { id: w[0] }),
        None => Ok(()),
    }
}
