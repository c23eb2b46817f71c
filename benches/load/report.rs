//! What a scenario measured and how it is shown: [`Figure`]s (a value, its unit, and the
//! values of the two baselines with the ratios where they ran the same scenario: the plain
//! baseline, the throughput limit, and the durable one, the limit for anything that waits for
//! an fsync), latency percentiles from HDR histograms, the targets with met / missed,
//! the human table on stdout, the one-line-per-scenario JSON of `--json`, why a scenario could
//! not run, and the progress bars on stderr (whose label is also the harness's "what it is
//! doing now" for the scenario watchdog in `main.rs`).

use std::fmt::Write as _;
use std::sync::Mutex;
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
    /// The durable baseline's value (the baseline that fsyncs each turn's log entries before
    /// its completion), where it ran the scenario: what a server that acknowledges only
    /// durable turns can at best reach.
    pub durable: Option<f64>,
}

impl Figure {
    /// A figure without a baseline.
    pub fn new(name: impl Into<String>, value: f64, unit: &'static str) -> Figure {
        Figure {
            name: name.into(),
            value,
            unit,
            baseline: None,
            durable: None,
        }
    }

    /// Roundtable / baseline (above 1: Roundtable's number is larger).
    pub fn ratio(&self) -> Option<f64> {
        ratio_to(self.value, self.baseline)
    }

    /// Roundtable / durable baseline.
    pub fn durable_ratio(&self) -> Option<f64> {
        ratio_to(self.value, self.durable)
    }
}

fn ratio_to(value: f64, reference: Option<f64>) -> Option<f64> {
    reference
        .filter(|b| *b != 0.0 && b.is_finite())
        .map(|b| value / b)
}

/// What a target judges: the figure itself or its ratio to one of the baselines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judge {
    /// The figure's value.
    Value,
    /// Roundtable / baseline.
    Ratio,
    /// Roundtable / durable baseline.
    DurableRatio,
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
    /// Why the scenario could not be measured (it then has no figures): what it waited for
    /// and did not get, or what failed. Makes the harness exit 1.
    pub failure: Option<String>,
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
            failure: None,
        }
    }

    /// The report of a scenario that could not be measured, saying why.
    pub fn failed(scenario: &'static str, why: String) -> ScenarioReport {
        ScenarioReport {
            failure: Some(why),
            ..ScenarioReport::new(scenario)
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

    /// Copies the durable baseline's values into this report's figures of the same name.
    pub fn attach_durable_baseline(&mut self, durable: &[Figure]) {
        for f in &mut self.figures {
            f.durable = durable
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
        let judge = if on_ratio { Judge::Ratio } else { Judge::Value };
        self.judge(figure, text, judge, check);
    }

    /// Adds a target judged by `check` on what `judge` picks of the figure.
    pub fn judge(&mut self, figure: &str, text: &str, judge: Judge, check: impl Fn(f64) -> bool) {
        let found = self.figure(figure).cloned();
        let (met, note) = match found {
            None => (None, "not measured in this run".to_string()),
            Some(f) => {
                let v = match judge {
                    Judge::Value => Some(f.value),
                    Judge::Ratio => f.ratio(),
                    Judge::DurableRatio => f.durable_ratio(),
                };
                match (v.filter(|v| v.is_finite()), judge) {
                    (Some(v), Judge::Value) => {
                        (Some(check(v)), format!("{} {}", fmt_num(v), f.unit))
                    }
                    (Some(v), Judge::Ratio) => (Some(check(v)), format!("ratio {}", fmt_num(v))),
                    (Some(v), Judge::DurableRatio) => (
                        Some(check(v)),
                        format!("ratio to the durable baseline {}", fmt_num(v)),
                    ),
                    (None, Judge::Value) => (None, "no value".to_string()),
                    (None, Judge::Ratio) => (None, "the baseline did not run".to_string()),
                    (None, Judge::DurableRatio) => {
                        (None, "the durable baseline did not run".to_string())
                    }
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
    /// `{"scenario","params","figures":[{name,value,unit[,baseline,ratio]
    /// [,durable_baseline,durable_ratio]}][,"error"]}`.
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
            #[serde(skip_serializing_if = "Option::is_none")]
            durable_baseline: Option<Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            durable_ratio: Option<Value>,
        }
        #[derive(Serialize)]
        struct JsonReport<'a> {
            scenario: &'a str,
            params: &'a Map<String, Value>,
            figures: Vec<JsonFigure<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a str>,
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
                durable_baseline: f.durable.map(json_num),
                durable_ratio: f
                    .durable
                    .map(|_| f.durable_ratio().map_or(Value::Null, json_num)),
            })
            .collect();
        serde_json::to_string(&JsonReport {
            scenario: self.scenario,
            params: &self.params,
            figures,
            error: self.failure.as_deref(),
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
        scenario_table(r, &mut out);
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

/// One scenario's section: its parameters, the figures (the durable baseline's two columns
/// only when it ran), the notes, or why it could not be measured.
fn scenario_table(r: &ScenarioReport, out: &mut String) {
    let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if params.is_empty() {
        let _ = writeln!(out, "\n## {}", r.scenario);
    } else {
        let _ = writeln!(out, "\n## {}  ({})", r.scenario, params.join(", "));
    }
    if let Some(why) = &r.failure {
        let _ = writeln!(out, "  FAILED: {why}");
    }
    let durable = r.figures.iter().any(|f| f.durable.is_some());
    let ratio = |x: Option<f64>| x.map_or(String::new(), |x| format!("{x:.2}x"));
    // Against `--url` the server may be anyone's.
    let external = r.params.get("server").and_then(Value::as_str) == Some("url");
    let mut rows: Vec<Vec<String>> = vec![[
        "figure",
        if external { "server" } else { "roundtable" },
        "baseline",
        "ratio",
        "durable",
        "vs durable",
        "unit",
    ]
    .map(str::to_string)
    .to_vec()];
    rows.extend(r.figures.iter().map(|f| {
        vec![
            f.name.clone(),
            fmt_num(f.value),
            f.baseline.map_or(String::new(), fmt_num),
            ratio(f.ratio()),
            f.durable.map_or(String::new(), fmt_num),
            ratio(f.durable_ratio()),
            f.unit.to_string(),
        ]
    }));
    if !durable {
        for row in &mut rows {
            row.drain(4..6);
        }
    }
    if rows.len() > 1 {
        let mut widths = vec![0; rows[0].len()];
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let last = widths.len() - 1;
        for row in &rows {
            let mut line = String::from(" ");
            for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
                // The name and the unit align left, numbers right.
                if i == 0 || i == last {
                    let _ = write!(line, " {cell:<w$}");
                } else {
                    let _ = write!(line, " {cell:>w$}");
                }
                if i < last {
                    line.push(' ');
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    for n in &r.notes {
        let _ = writeln!(out, "  note: {n}");
    }
}

/// What the harness is doing now (the label of the last progress bar), for the scenario
/// watchdog's message.
static ACTIVITY: Mutex<String> = Mutex::new(String::new());

/// The label of the last progress bar started.
pub fn activity() -> String {
    ACTIVITY.lock().map(|a| a.clone()).unwrap_or_default()
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(len: u64, message: String) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg:<32} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    if let Ok(mut a) = ACTIVITY.lock() {
        a.clone_from(&message);
    }
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// One line on stderr that does not break a running progress bar.
pub fn say(line: &str) {
    eprintln!("load: {line}");
}
