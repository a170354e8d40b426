//! The few statistics the bench prints.

/// The smallest, middle and largest of a set of figures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spread {
    pub(crate) min: f64,
    pub(crate) median: f64,
    pub(crate) max: f64,
}

impl Spread {
    /// None for no figures; the median of an even count is the mean of the middle two.
    pub(crate) fn of(figures: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut sorted: Vec<f64> = figures.into_iter().collect();
        sorted.sort_by(f64::total_cmp);
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let middle = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        } else {
            sorted[middle]
        };
        Some(Self { min, median, max })
    }
}

/// The median of `figures`, 0 for none.
pub(crate) fn median(figures: impl IntoIterator<Item = f64>) -> f64 {
    Spread::of(figures).map_or(0.0, |spread| spread.median)
}

/// 12345.6 as `12,346`.
pub(crate) fn thousands(figure: f64) -> String {
    let digits = format!("{:.0}", figure.abs());
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if figure < -0.5 {
        grouped.insert(0, '-');
    }
    grouped
}
