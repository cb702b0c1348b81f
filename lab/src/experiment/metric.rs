//! What a scenario declares of each metric it reports: unit, direction, the smallest change
//! that matters, range, and whether comparisons are decided on it.

use crate::report::Direction;
use crate::stats::{Magnitude, Range};

/// A metric a scenario reports for every boot (unless it is optional).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricDef {
    /// Its name in measurements, tables and `--primary` (`share_on_irq_cpu`).
    pub name: String,
    /// Shown after the name in the table ("%", "per 100 completions", "s").
    pub unit: String,
    /// Which way is better, for the table's wording.
    pub direction: Direction,
    /// The smallest change that matters, in `unit` (or relative to the base's mean).
    pub magnitude: Magnitude,
    /// A boot may have nothing to measure it on (a share of events that did not occur, an
    /// observer switched off): then it has no sample, and the table's n says so.
    pub optional: bool,
    /// The values it can take (a share: 0-100).
    pub range: Range,
    /// Whether comparisons are decided on it (unless the experiment names its own primaries).
    pub primary: bool,
}

impl MetricDef {
    /// A metric of `unit` whose smallest change that matters is `magnitude` (a number in `unit`,
    /// or [`Magnitude::relative`]); not primary, required in every boot, any value.
    pub fn new(
        name: &str,
        unit: &str,
        direction: Direction,
        magnitude: impl Into<Magnitude>,
    ) -> MetricDef {
        MetricDef {
            name: name.to_string(),
            unit: unit.to_string(),
            direction,
            magnitude: magnitude.into(),
            optional: false,
            range: Range::ANY,
            primary: false,
        }
    }

    /// A percentage share, from 0 to 100.
    pub fn share(name: &str, magnitude: f64) -> MetricDef {
        MetricDef::new(name, "%", Direction::Neutral, magnitude).range(Range::PERCENT)
    }

    /// See [`MetricDef::optional`].
    pub fn optional(mut self) -> MetricDef {
        self.optional = true;
        self
    }

    /// See [`MetricDef::range`].
    pub fn range(mut self, range: Range) -> MetricDef {
        self.range = range;
        self
    }

    /// Never below 0 (counts, rates, times).
    pub fn non_negative(self) -> MetricDef {
        self.range(Range::NON_NEGATIVE)
    }

    /// See [`MetricDef::primary`].
    pub fn primary(mut self) -> MetricDef {
        self.primary = true;
        self
    }
}
