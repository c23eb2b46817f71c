//! The `get_weather` tool: deterministic, clearly labelled SAMPLE weather (not a forecast),
//! derived from a stable hash of the location so the same place always gets the same answer.

use serde_json::{json, Value};

use super::{required_str, ToolSpec};

/// Name of the sample-weather tool.
pub const GET_WEATHER: &str = "get_weather";

/// What the model is offered.
pub(super) fn spec() -> ToolSpec {
    ToolSpec {
        name: GET_WEATHER.to_owned(),
        description: "Get SAMPLE weather data for a location. This is NOT a real \
            forecast: it returns made-up, clearly labelled sample data (the same \
            location always gives the same answer). Use it only for demonstrations \
            and tell the user the data is not real."
            .to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "City or place name, e.g. \"Paris\"."
                }
            },
            "required": ["location"]
        }),
    }
}

/// Runs a call: `{"location": string}` → the sample weather line.
pub(super) fn run(input: &Value) -> Result<String, String> {
    sample_weather(required_str(input, "location")?)
}

/// Longest location name `get_weather` accepts, in characters.
const MAX_LOCATION_CHARS: usize = 200;

/// The skies sample weather picks from (by the location's hash).
const CONDITIONS: [&str; 8] = [
    "sunny",
    "partly cloudy",
    "cloudy",
    "overcast",
    "light rain",
    "rain showers",
    "thunderstorms",
    "foggy",
];

/// Deterministic sample weather for `location`, derived from a stable hash (FNV-1a) of the
/// trimmed, lower-cased name so the same place always gets the same answer.
fn sample_weather(location: &str) -> Result<String, String> {
    let location = location.trim();
    if location.is_empty() {
        return Err("location must not be empty".to_owned());
    }
    if location.chars().count() > MAX_LOCATION_CHARS {
        return Err(format!(
            "location is too long (at most {MAX_LOCATION_CHARS} characters)"
        ));
    }
    let mut h = fnv1a(location.to_lowercase().as_bytes());
    let mut next = |modulus: u64| {
        let v = h % modulus;
        h /= modulus;
        v
    };
    let temperature = next(41) as i64 - 5; // -5..=35 °C
    let condition = CONDITIONS[next(CONDITIONS.len() as u64) as usize];
    let humidity = 25 + next(71); // 25..=95 %
    let wind = next(46); // 0..=45 km/h
    let display: String = location.chars().filter(|c| !c.is_control()).collect();
    Ok(format!(
        "SAMPLE DATA (not a real forecast) for {display}: {temperature}°C, {condition}, \
         humidity {humidity}%, wind {wind} km/h"
    ))
}

/// 64-bit FNV-1a: stable across Rust versions and runs, unlike `DefaultHasher`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::agent::tools::run_builtin_tool;

    #[test]
    fn weather_is_deterministic_and_labelled() {
        let a = run_builtin_tool(GET_WEATHER, &json!({"location": "Paris"}))
            .unwrap()
            .unwrap();
        let b = run_builtin_tool(GET_WEATHER, &json!({"location": "  paris "}))
            .unwrap()
            .unwrap();
        assert!(
            a.starts_with("SAMPLE DATA (not a real forecast) for Paris: "),
            "{a}"
        );
        assert!(
            b.starts_with("SAMPLE DATA (not a real forecast) for paris: "),
            "{b}"
        );
        // Same lower-cased, trimmed location → same numbers.
        assert_eq!(a.split_once(": ").unwrap().1, b.split_once(": ").unwrap().1);
        assert_eq!(sample_weather("Paris"), sample_weather("Paris"));
        assert!(
            a.contains("°C") && a.contains("humidity") && a.contains("km/h"),
            "{a}"
        );
        let others: Vec<_> = ["London", "Tokyo", "Lagos", "Lima", "Oslo"]
            .iter()
            .map(|l| {
                sample_weather(l)
                    .unwrap()
                    .split_once(": ")
                    .unwrap()
                    .1
                    .to_owned()
            })
            .collect();
        assert!(
            others.iter().any(|o| o != &others[0]),
            "all sample data identical"
        );
    }

    #[test]
    fn weather_errors() {
        for input in [json!({"location": ""}), json!({"location": "   "})] {
            let e = run_builtin_tool(GET_WEATHER, &input).unwrap().unwrap_err();
            assert!(e.contains("must not be empty"), "{e}");
        }
        let e = sample_weather(&"x".repeat(MAX_LOCATION_CHARS + 1)).unwrap_err();
        assert!(e.contains("too long"), "{e}");
    }
}
