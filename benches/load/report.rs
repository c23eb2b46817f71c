//! What a scenario measured and how it is shown: [`Figure`]s (a value, its unit, and the
//! baseline's value with the ratio where the baseline ran the same scenario), latency
//! percentiles from HDR histograms, the targets with met / missed, the human table on
//! stdout, the one-line-per-scenario JSON of `--json`, and the progress bars on stderr.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// Latencies are recorded in microseconds, from 1 µs to 10 minutes, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Records one latency into `hist` (saturating at its upper bound).
pub fn record(hist: &mut Histogram<u64>, elapsed: Duration) {
    let us = (elapsed.as_micros() as u64).clamp(1, hist.high());
    hist.saturating_record(us);
}

/// One measured number.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Machine name, e.g. `delivered_msgs_per_s`.
    pub name: String,
    /// Roundtable's value.
    pub value: f64,
    /// Unit, e.g. `msg/s`, `ms`, `KB`.
    pub unit: &'static str,
    /// The baseline's value for the same figure, where it ran the scenario.
    pub baseline: Option<f64>,
}

impl Figure {
    /// A figure without a baseline.
    pub fn new(name: impl Into<String>, value: f64, unit: &'static str) -> Figure {
        Figure {
            name: name.into(),
            value,
            unit,
            baseline: None,
        }
    }

    /// Roundtable / baseline (above 1: Roundtable's number is larger).
    pub fn ratio(&self) -> Option<f64> {
        self.baseline
            .filter(|b| *b != 0.0 && b.is_finite())
            .map(|b| self.value / b)
    }
}

/// p50 / p99 / p99.9 of `hist` as three `ms` figures named `<prefix>_p50_ms` etc.
pub fn percentiles(prefix: &str, hist: &Histogram<u64>) -> Vec<Figure> {
    [("p50", 50.0), ("p99", 99.0), ("p999", 99.9)]
        .into_iter()
        .map(|(tag, q)| {
            let ms = if hist.is_empty() {
                f64::NAN
            } else {
                hist.value_at_quantile(q / 100.0) as f64 / 1000.0
            };
            Figure::new(format!("{prefix}_{tag}_ms"), ms, "ms")
        })
        .collect()
}

/// The target for one figure.
#[derive(Debug, Clone)]
pub struct Target {
    /// Which figure it judges.
    pub figure: String,
    /// The target as the issue words it.
    pub text: String,
    /// Met, missed, or not judged (`None`: the run was too small or the figure is missing).
    pub met: Option<bool>,
    /// Why it was not judged, or what the judgement rests on.
    pub note: String,
}

/// Everything one scenario produced.
#[derive(Debug, Clone)]
pub struct ScenarioReport {
    /// `fanout`, `rooms`, …
    pub scenario: &'static str,
    /// Sizes and settings actually used.
    pub params: Map<String, Value>,
    /// The figures, in display order.
    pub figures: Vec<Figure>,
    /// Targets of the issue this scenario judges.
    pub targets: Vec<Target>,
    /// Warnings (scaled down, time cap hit, …) printed under the table.
    pub notes: Vec<String>,
}

impl ScenarioReport {
    /// An empty report.
    pub fn new(scenario: &'static str) -> ScenarioReport {
        ScenarioReport {
            scenario,
            params: Map::new(),
            figures: Vec::new(),
            targets: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Sets a parameter.
    pub fn param(&mut self, key: &str, value: impl Into<Value>) {
        self.params.insert(key.to_string(), value.into());
    }

    /// The figure called `name`, if measured.
    pub fn figure(&self, name: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.name == name)
    }

    /// Copies the baseline's values into this report's figures of the same name.
    pub fn attach_baseline(&mut self, baseline: &[Figure]) {
        for f in &mut self.figures {
            f.baseline = baseline
                .iter()
                .find(|b| b.name == f.name)
                .map(|b| b.value)
                .filter(|v| v.is_finite());
        }
    }

    /// Adds a target judged by `check` on the figure's value (or its ratio when `on_ratio`).
    pub fn target(
        &mut self,
        figure: &str,
        text: &str,
        on_ratio: bool,
        check: impl Fn(f64) -> bool,
    ) {
        let found = self.figure(figure).cloned();
        let (met, note) = match found {
            None => (None, "not measured in this run".to_string()),
            Some(f) => {
                let v = if on_ratio { f.ratio() } else { Some(f.value) };
                match v.filter(|v| v.is_finite()) {
                    Some(v) => (
                        Some(check(v)),
                        if on_ratio {
                            format!("ratio {}", fmt_num(v))
                        } else {
                            format!("{} {}", fmt_num(v), f.unit)
                        },
                    ),
                    None if on_ratio => (None, "the baseline did not run".to_string()),
                    None => (None, "no value".to_string()),
                }
            }
        };
        self.targets.push(Target {
            figure: figure.to_string(),
            text: text.to_string(),
            met,
            note,
        });
    }

    /// The `--json` line, keys in the order:
    /// `{"scenario","params","figures":[{name,value,unit[,baseline,ratio]}]}`.
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct JsonFigure<'a> {
            name: &'a str,
            value: Value,
            unit: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            baseline: Option<Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            ratio: Option<Value>,
        }
        #[derive(Serialize)]
        struct JsonReport<'a> {
            scenario: &'a str,
            params: &'a Map<String, Value>,
            figures: Vec<JsonFigure<'a>>,
        }
        let figures = self
            .figures
            .iter()
            .map(|f| JsonFigure {
                name: &f.name,
                value: json_num(f.value),
                unit: f.unit,
                baseline: f.baseline.map(json_num),
                ratio: f.baseline.map(|_| f.ratio().map_or(Value::Null, json_num)),
            })
            .collect();
        serde_json::to_string(&JsonReport {
            scenario: self.scenario,
            params: &self.params,
            figures,
        })
        .expect("report serializes")
    }
}

fn json_num(v: f64) -> Value {
    if v.is_finite() {
        // Round to 4 significant decimals so the output stays readable.
        let r = (v * 10_000.0).round() / 10_000.0;
        json!(r)
    } else {
        Value::Null
    }
}

/// A number for people: integers without decimals, small numbers with three.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "—".to_string()
    } else if v.abs() >= 1000.0 || (v.fract() == 0.0 && v.abs() < 1e15) {
        group_thousands(v.round() as i64)
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn group_thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// The human table of every report, then every target with met / missed.
pub fn table(reports: &[ScenarioReport]) -> String {
    let mut out = String::new();
    for r in reports {
        let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "\n## {}  ({})", r.scenario, params.join(", "));
        let rows: Vec<[String; 5]> = r
            .figures
            .iter()
            .map(|f| {
                [
                    f.name.clone(),
                    fmt_num(f.value),
                    f.baseline.map_or(String::new(), fmt_num),
                    f.ratio().map_or(String::new(), |x| format!("{x:.2}x")),
                    f.unit.to_string(),
                ]
            })
            .collect();
        let head = ["figure", "roundtable", "baseline", "ratio", "unit"];
        let mut widths = head.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: [&str; 5]| {
            format!(
                "  {:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {:<w4$}",
                cells[0],
                cells[1],
                cells[2],
                cells[3],
                cells[4],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2],
                w3 = widths[3],
                w4 = widths[4]
            )
        };
        let _ = writeln!(out, "{}", line(head).trim_end());
        for row in &rows {
            let cells = [
                row[0].as_str(),
                row[1].as_str(),
                row[2].as_str(),
                row[3].as_str(),
                row[4].as_str(),
            ];
            let _ = writeln!(out, "{}", line(cells).trim_end());
        }
        for n in &r.notes {
            let _ = writeln!(out, "  note: {n}");
        }
    }
    let targets: Vec<(&str, &Target)> = reports
        .iter()
        .flat_map(|r| r.targets.iter().map(move |t| (r.scenario, t)))
        .collect();
    if !targets.is_empty() {
        let _ = writeln!(out, "\n## targets");
        for (scenario, t) in targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "not judged",
            };
            let _ = writeln!(
                out,
                "  {verdict:<10} {scenario}: {} ({}: {})",
                t.text, t.figure, t.note
            );
        }
    }
    out
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(len: u64, message: String) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg:<32} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// One line on stderr that does not break a running progress bar.
pub fn say(line: &str) {
    eprintln!("load: {line}");
}
