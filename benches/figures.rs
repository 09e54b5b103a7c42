//! The bench's figures gathered over repeated runs, and the closing summary: each figure's
//! median beside its range and the goal it is measured against (issue 42 asks for the median
//! of 3 runs). Knows nothing of how a figure is measured.

/// Figures in the order they were first added.
#[derive(Default)]
pub struct Figures {
    rows: Vec<Figure>,
}

struct Figure {
    name: String,
    unit: &'static str,
    goal: &'static str,
    values: Vec<f64>,
}

impl Figures {
    /// One run's value of figure `name` (the first value fixes its unit and goal).
    pub fn add(&mut self, name: &str, unit: &'static str, goal: &'static str, value: f64) {
        match self.rows.iter_mut().find(|f| f.name == name) {
            Some(figure) => figure.values.push(value),
            None => self.rows.push(Figure {
                name: name.to_string(),
                unit,
                goal,
                values: vec![value],
            }),
        }
    }

    /// The median of figure `name`'s runs, if it has any.
    pub fn median_of(&self, name: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|f| f.name == name)
            .map(|f| median(&f.values))
    }

    /// The summary table: figure, median, range over the runs, goal.
    pub fn print(&self) {
        println!();
        println!("summary (median of the runs, their range, the goal):");
        let width = self.rows.iter().map(|f| f.name.len()).max().unwrap_or(0);
        for figure in &self.rows {
            let (low, high) = range(&figure.values);
            let unit = figure.unit;
            let spread = if figure.values.len() > 1 {
                format!(
                    "  [{} – {} over {} runs]",
                    number(low),
                    number(high),
                    figure.values.len()
                )
            } else {
                "  [one run]".to_string()
            };
            let goal = if figure.goal.is_empty() {
                String::new()
            } else {
                format!("  goal {}", figure.goal)
            };
            println!(
                "  {:width$}  {} {unit}{spread}{goal}",
                figure.name,
                number(median(&figure.values)),
            );
        }
    }
}

/// The middle value (the mean of the two middle ones for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

fn range(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        })
}

/// Three significant figures at most, no exponent.
fn number(value: f64) -> String {
    match value.abs() {
        v if v >= 100.0 => format!("{value:.0}"),
        v if v >= 10.0 => format!("{value:.1}"),
        _ => format!("{value:.2}"),
    }
}
