//! The crate's one error type.

/// A strategy that cannot be used as written. Each variant names the field (relative to the
/// strategy, e.g. `percentages`, `analysis.max_error_ratio`) and says what is expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategyError {
    #[error("`{field}` is empty: expected at least one percentage, the last being 100")]
    Empty { field: &'static str },
    #[error("`{field}[{index}]` is {value}: expected a percentage from 1 to 100")]
    OutOfRange {
        field: &'static str,
        index: usize,
        value: u32,
    },
    #[error(
        "`{field}[{index}]` is {value}, not above {previous}: expected strictly increasing percentages"
    )]
    NotIncreasing {
        field: &'static str,
        index: usize,
        value: u32,
        previous: u32,
    },
    #[error("`{field}` ends at {last}: expected the last percentage to be 100")]
    NotEndingAt100 { field: &'static str, last: u32 },
    #[error("`{field}` is {value}: expected {expected}")]
    Invalid {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}
