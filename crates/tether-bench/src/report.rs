//! Collects figures and prints them as a table plus `BENCH` lines.

/// One measured figure.
struct Figure {
    name: &'static str,
    value: f64,
    unit: &'static str,
    what: String,
}

/// All figures of a run, in the order measured.
#[derive(Default)]
pub struct Report {
    figures: Vec<Figure>,
}

impl Report {
    /// Records a figure and prints it as soon as it is known.
    pub fn add(
        &mut self,
        name: &'static str,
        value: f64,
        unit: &'static str,
        what: impl Into<String>,
    ) {
        let what = what.into();
        eprintln!("  {name:<32} {value:>12.2} {unit:<7} {what}");
        self.figures.push(Figure {
            name,
            value,
            unit,
            what,
        });
    }

    /// The value of an earlier figure.
    pub fn get(&self, name: &str) -> f64 {
        self.figures
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.value)
            .unwrap_or(f64::NAN)
    }

    /// Prints the table, then the `BENCH` lines.
    pub fn print(&self, mode: &str) {
        println!();
        println!("tether benchmark ({mode} run)");
        println!("{:<32} {:>12}  {:<7}  what", "figure", "value", "unit");
        println!("{}", "-".repeat(100));
        for f in &self.figures {
            println!(
                "{:<32} {:>12.2}  {:<7}  {}",
                f.name, f.value, f.unit, f.what
            );
        }
        println!();
        for f in &self.figures {
            println!("BENCH {} {:.2}", f.name, f.value);
        }
    }
}
