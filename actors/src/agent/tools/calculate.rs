//! The `calculate` tool: a recursive-descent arithmetic evaluator ([`calculate()`]) and the
//! number formatting of its answers ([`format_number`]). Every limit has its reason next to it;
//! errors name the problem and its position; nothing here panics on any input (the hostile
//! nesting test below).

use serde_json::{json, Value};

use super::{required_str, ToolSpec};

/// Name of the arithmetic tool.
pub const CALCULATE: &str = "calculate";

/// What the model is offered.
pub(super) fn spec() -> ToolSpec {
    ToolSpec {
        name: CALCULATE.to_owned(),
        description: "Evaluate an arithmetic expression and return the numeric result. \
            Supports numbers (e.g. 42, 3.14, .5, 1e3), the operators + - * / ^ \
            (^ is exponentiation, right-associative), unary minus and parentheses."
            .to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "The expression to evaluate, e.g. \"(2 + 3) * 4 ^ 2\"."
                }
            },
            "required": ["expression"]
        }),
    }
}

/// Runs a call: `{"expression": string}` → the formatted result.
pub(super) fn run(input: &Value) -> Result<String, String> {
    let expression = required_str(input, "expression")?;
    calculate(expression).map(format_number)
}

/// Deepest nesting of parentheses, unary signs and `^` operands [`calculate`] accepts; keeps
/// the recursive descent far from the stack limit on hostile input.
const MAX_NESTING: usize = 200;

/// Evaluates an arithmetic expression.
///
/// Grammar (usual math conventions):
///
/// ```text
/// expr    := term (('+' | '-') term)*
/// term    := unary (('*' | '/') unary)*
/// unary   := ('+' | '-') unary | power
/// power   := primary ('^' unary)?        // right-associative: 2^3^2 = 2^9
/// primary := number | '(' expr ')'
/// number  := digits ['.' digits] | '.' digits, optionally followed by e[+-]digits
/// ```
///
/// so `-2^2 = -4`, `2^-1 = 0.5` and `2^3^2 = 512`. Whitespace is ignored between tokens.
/// Errors name the problem and its 1-based character position: unexpected character,
/// unbalanced parentheses, empty expression, trailing input, invalid number, division by zero
/// and results that are not finite real numbers (overflow, `(-8)^(1/3)`).
pub fn calculate(expression: &str) -> Result<f64, String> {
    let mut parser = Parser {
        chars: expression.chars().collect(),
        pos: 0,
        depth: 0,
    };
    if parser.peek().is_none() {
        return Err("empty expression".to_owned());
    }
    let value = parser.expr()?;
    match parser.peek() {
        None => Ok(value),
        Some(')') => Err(format!(
            "unbalanced parentheses: unexpected ')' at position {} with no matching '('",
            parser.pos + 1
        )),
        Some(c) if !is_known_char(c) => Err(parser.unexpected_char(c)),
        Some(_) => {
            let rest: String = parser.chars[parser.pos..].iter().collect();
            Err(format!(
                "unexpected trailing input '{}' at position {} (missing operator?)",
                rest.trim_end(),
                parser.pos + 1
            ))
        }
    }
}

/// Characters that may start a token of a valid expression (besides whitespace); `e`/`E`
/// only appear inside a number, which consumes them.
fn is_known_char(c: char) -> bool {
    c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | '*' | '/' | '^' | '(' | ')')
}

struct Parser {
    chars: Vec<char>,
    /// Index into `chars` of the next unread character.
    pos: usize,
    /// Current nesting depth, see [`MAX_NESTING`].
    depth: usize,
}

impl Parser {
    /// Skips whitespace and returns the next character without consuming it.
    fn peek(&mut self) -> Option<char> {
        while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
            self.pos += 1;
        }
        self.chars.get(self.pos).copied()
    }

    fn unexpected_char(&self, c: char) -> String {
        format!("unexpected character '{c}' at position {}", self.pos + 1)
    }

    fn expr(&mut self) -> Result<f64, String> {
        let mut value = self.term()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            let at = self.pos;
            self.pos += 1;
            let rhs = self.term()?;
            let result = if op == '+' { value + rhs } else { value - rhs };
            value = finite(result, op, at)?;
        }
        Ok(value)
    }

    fn term(&mut self) -> Result<f64, String> {
        let mut value = self.unary()?;
        while let Some(op @ ('*' | '/')) = self.peek() {
            let at = self.pos;
            self.pos += 1;
            let rhs = self.unary()?;
            let result = if op == '*' {
                value * rhs
            } else {
                if rhs == 0.0 {
                    return Err(format!("division by zero at position {}", at + 1));
                }
                value / rhs
            };
            value = finite(result, op, at)?;
        }
        Ok(value)
    }

    fn unary(&mut self) -> Result<f64, String> {
        if self.depth >= MAX_NESTING {
            return Err(format!(
                "expression is nested too deeply (more than {MAX_NESTING} levels) at position {}",
                self.pos + 1
            ));
        }
        self.depth += 1;
        let result = match self.peek() {
            Some('-') => {
                self.pos += 1;
                self.unary().map(|v| -v)
            }
            Some('+') => {
                self.pos += 1;
                self.unary()
            }
            _ => self.power(),
        };
        self.depth -= 1;
        result
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.primary()?;
        if self.peek() == Some('^') {
            let at = self.pos;
            self.pos += 1;
            let exponent = self.unary()?;
            return finite(base.powf(exponent), '^', at);
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<f64, String> {
        match self.peek() {
            None => Err(format!(
                "unexpected end of expression at position {}: expected a number or '('",
                self.pos + 1
            )),
            Some('(') => {
                let open = self.pos;
                self.pos += 1;
                if self.peek() == Some(')') {
                    return Err(format!(
                        "empty parentheses at position {}: expected an expression",
                        open + 1
                    ));
                }
                let value = self.expr()?;
                match self.peek() {
                    Some(')') => {
                        self.pos += 1;
                        Ok(value)
                    }
                    None => Err(format!(
                        "unbalanced parentheses: '(' at position {} is never closed",
                        open + 1
                    )),
                    Some(c) if !is_known_char(c) => Err(self.unexpected_char(c)),
                    Some(c) => Err(format!(
                        "expected ')' to close '(' at position {} but found '{c}' at position {}",
                        open + 1,
                        self.pos + 1
                    )),
                }
            }
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            Some(')') => Err(format!(
                "unbalanced parentheses: unexpected ')' at position {}",
                self.pos + 1
            )),
            Some(c) if !is_known_char(c) => Err(self.unexpected_char(c)),
            Some(c) => Err(format!(
                "expected a number or '(' at position {} but found '{c}'",
                self.pos + 1
            )),
        }
    }

    fn number(&mut self) -> Result<f64, String> {
        let start = self.pos;
        let at = |chars: &[char], i: usize| chars.get(i).copied();
        let mut end = start;
        while at(&self.chars, end).is_some_and(|c| c.is_ascii_digit() || c == '.') {
            end += 1;
        }
        // Exponent: e/E, optional sign, digits. A bare `e` is kept so the error names it.
        if at(&self.chars, end).is_some_and(|c| c == 'e' || c == 'E') {
            end += 1;
            if at(&self.chars, end).is_some_and(|c| c == '+' || c == '-') {
                end += 1;
            }
            while at(&self.chars, end).is_some_and(|c| c.is_ascii_digit()) {
                end += 1;
            }
        }
        let text: String = self.chars[start..end].iter().collect();
        self.pos = end;
        let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
        let valid_mantissa = mantissa.chars().filter(|&c| c == '.').count() <= 1
            && mantissa.chars().any(|c| c.is_ascii_digit());
        let valid_exponent = match text.find(['e', 'E']) {
            Some(i) => text[i + 1..]
                .trim_start_matches(['+', '-'])
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit()),
            None => true,
        };
        let parsed = if valid_mantissa && valid_exponent {
            text.parse::<f64>().ok()
        } else {
            None
        };
        match parsed {
            Some(v) if v.is_finite() => Ok(v),
            Some(_) => Err(format!(
                "number '{text}' at position {} is too large",
                start + 1
            )),
            None => Err(format!("invalid number '{text}' at position {}", start + 1)),
        }
    }
}

/// Passes finite results through; names the operator and position of overflow / NaN.
fn finite(value: f64, op: char, at: usize) -> Result<f64, String> {
    if value.is_finite() {
        Ok(value)
    } else if value.is_nan() {
        Err(format!(
            "result of '{op}' at position {} is not a real number",
            at + 1
        ))
    } else {
        Err(format!(
            "overflow: result of '{op}' at position {} is too large",
            at + 1
        ))
    }
}

/// Formats a number for people: integers without a decimal point (`5`, `-12`,
/// `18446744073709551616`), other values rounded to 12 significant digits with trailing
/// zeros trimmed (`0.1 + 0.2` → `0.3`, `1/3` → `0.333333333333`). Magnitudes of `1e21` and
/// above or below `1e-6` use exponent notation (`1e21`, `1.5e-7`); `-0` prints as `0` and
/// non-finite values as `inf`, `-inf` and `NaN`.
pub fn format_number(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if x == 0.0 {
        return "0".to_owned();
    }
    let abs = x.abs();
    if !(1e-6..1e21).contains(&abs) {
        // `{:e}` never prints a `+` in the exponent: "1.50000000000e-7".
        let s = format!("{x:.11e}");
        let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
        return format!("{}e{exponent}", trim_fraction(mantissa));
    }
    if x.fract() == 0.0 {
        return format!("{x:.0}");
    }
    // abs is in [1e-6, 1e21) here, so the exponent is in [-6, 20].
    let magnitude = abs.log10().floor() as i32;
    let decimals = (11 - magnitude).max(0) as usize;
    let s = trim_fraction(&format!("{x:.decimals$}")).to_owned();
    if s == "-0" {
        "0".to_owned()
    } else {
        s
    }
}

/// Drops trailing zeros after a decimal point, and the point itself if nothing is left.
fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calc(expression: &str) -> f64 {
        calculate(expression).unwrap_or_else(|e| panic!("{expression:?} failed: {e}"))
    }

    fn calc_err(expression: &str) -> String {
        match calculate(expression) {
            Ok(v) => panic!("{expression:?} should fail but gave {v}"),
            Err(e) => e,
        }
    }

    fn assert_close(actual: f64, expected: f64) {
        assert!(
            (actual - expected).abs() <= 1e-12 * expected.abs().max(1.0),
            "{actual} != {expected}"
        );
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(calc("2+3*4"), 14.0);
        assert_eq!(calc("(2+3)*4"), 20.0);
        assert_eq!(calc("2^3^2"), 512.0);
        assert_eq!(calc("-2^2"), -4.0);
        assert_eq!(calc("(-2)^2"), 4.0);
        assert_eq!(calc("10/4"), 2.5);
        assert_eq!(calc("10-4-3"), 3.0);
        assert_eq!(calc("64/4/2"), 8.0);
        assert_eq!(calc("2*3^2"), 18.0);
        assert_eq!(calc("2^-1"), 0.5);
        assert_eq!(calc("2^-2^2"), 0.0625);
        assert_eq!(calc("--3"), 3.0);
        assert_eq!(calc("+3 - -2"), 5.0);
        assert_eq!(calc("3*-2"), -6.0);
        assert_eq!(calc("  ( 1 + 2 ) * ( 3 + 4 )  "), 21.0);
        assert_eq!(calc("((((7))))"), 7.0);
        assert_eq!(calc("\t1\n+\n2"), 3.0);
    }

    #[test]
    fn decimals_and_exponents() {
        assert_eq!(calc(".5"), 0.5);
        assert_eq!(calc("5."), 5.0);
        assert_eq!(calc("3.25*2"), 6.5);
        assert_eq!(calc("1e3"), 1000.0);
        assert_eq!(calc("1E3"), 1000.0);
        assert_eq!(calc("2.5e-3"), 0.0025);
        assert_eq!(calc("1e+2+1"), 101.0);
        assert_eq!(calc(".5e1"), 5.0);
        assert_close(calc("0.1+0.2"), 0.3);
        assert_close(calc("4^0.5"), 2.0);
        assert_eq!(calc("0^0"), 1.0);
    }

    #[test]
    fn empty_expression() {
        assert_eq!(calc_err(""), "empty expression");
        assert_eq!(calc_err("   \t\n"), "empty expression");
    }

    #[test]
    fn unexpected_character() {
        assert_eq!(calc_err("2 + x"), "unexpected character 'x' at position 5");
        assert_eq!(calc_err("2 × 3"), "unexpected character '×' at position 3");
        assert_eq!(calc_err("3 % 2"), "unexpected character '%' at position 3");
        assert_eq!(calc_err("2 + e"), "unexpected character 'e' at position 5");
        assert_eq!(
            calc_err("sqrt(4)"),
            "unexpected character 's' at position 1"
        );
        assert_eq!(
            calc_err("(1 $ 2)"),
            "unexpected character '$' at position 4"
        );
        assert!(calc_err("2+*3").contains("found '*'"));
        assert!(calc_err("2+*3").contains("position 3"));
        assert!(calc_err("*3").contains("position 1"));
    }

    #[test]
    fn unbalanced_parentheses() {
        let e = calc_err("(2+3");
        assert!(e.starts_with("unbalanced parentheses"), "{e}");
        assert!(e.contains("position 1"), "{e}");
        let e = calc_err("((1)");
        assert!(
            e.starts_with("unbalanced parentheses") && e.contains("position 1"),
            "{e}"
        );
        let e = calc_err("2+3)");
        assert!(
            e.starts_with("unbalanced parentheses") && e.contains("position 4"),
            "{e}"
        );
        let e = calc_err(")");
        assert!(
            e.starts_with("unbalanced parentheses") && e.contains("position 1"),
            "{e}"
        );
        let e = calc_err("()");
        assert!(e.contains("empty parentheses"), "{e}");
        let e = calc_err("(1 2)");
        assert!(
            e.contains("expected ')'") && e.contains("position 4"),
            "{e}"
        );
    }

    #[test]
    fn trailing_input() {
        let e = calc_err("2 3");
        assert!(
            e.starts_with("unexpected trailing input '3' at position 3"),
            "{e}"
        );
        let e = calc_err("(1)(2)");
        assert!(
            e.contains("trailing input") && e.contains("position 4"),
            "{e}"
        );
        let e = calc_err("1.2.3");
        assert_eq!(e, "invalid number '1.2.3' at position 1");
    }

    #[test]
    fn incomplete_and_invalid_numbers() {
        let e = calc_err("2+");
        assert!(
            e.contains("unexpected end of expression at position 3"),
            "{e}"
        );
        let e = calc_err("-");
        assert!(e.contains("unexpected end of expression"), "{e}");
        assert_eq!(calc_err("."), "invalid number '.' at position 1");
        assert_eq!(calc_err("1e"), "invalid number '1e' at position 1");
        assert_eq!(calc_err("2*1e+"), "invalid number '1e+' at position 3");
        assert_eq!(
            calc_err("1e999"),
            "number '1e999' at position 1 is too large"
        );
    }

    #[test]
    fn division_by_zero() {
        assert_eq!(calc_err("1/0"), "division by zero at position 2");
        assert_eq!(calc_err("0/0"), "division by zero at position 2");
        assert_eq!(calc_err("5 / (2 - 2)"), "division by zero at position 3");
        assert_eq!(calc_err("1/-0"), "division by zero at position 2");
    }

    #[test]
    fn non_finite_results() {
        let e = calc_err("10^400");
        assert!(
            e.starts_with("overflow") && e.contains("'^' at position 3"),
            "{e}"
        );
        let e = calc_err("1e308*10");
        assert!(e.starts_with("overflow") && e.contains("'*'"), "{e}");
        let e = calc_err("1e308+1e308");
        assert!(e.starts_with("overflow") && e.contains("'+'"), "{e}");
        let e = calc_err("-1e308-1e308");
        assert!(e.starts_with("overflow") && e.contains("'-'"), "{e}");
        let e = calc_err("0^-1");
        assert!(e.starts_with("overflow"), "{e}");
        let e = calc_err("(-8)^(1/3)");
        assert!(e.contains("not a real number"), "{e}");
    }

    #[test]
    fn hostile_nesting_does_not_overflow_the_stack() {
        let deep = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
        assert!(calc_err(&deep).contains("nested too deeply"));
        assert!(calc_err(&"-".repeat(100_000)).contains("nested too deeply"));
        assert!(calc_err(&"2^".repeat(100_000)).contains("nested too deeply"));
        let ok = format!("{}1{}", "(".repeat(50), ")".repeat(50));
        assert_eq!(calc(&ok), 1.0);
    }

    #[test]
    fn format_number_output() {
        assert_eq!(format_number(5.0), "5");
        assert_eq!(format_number(-12.0), "-12");
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_number(-0.0), "0");
        assert_eq!(format_number(2.5), "2.5");
        assert_eq!(format_number(0.1 + 0.2), "0.3");
        assert_eq!(format_number(1.0 / 3.0), "0.333333333333");
        assert_eq!(format_number(2.0 / 3.0), "0.666666666667");
        assert_eq!(format_number(100.0 / 3.0), "33.3333333333");
        assert_eq!(format_number(-1234.5678), "-1234.5678");
        assert_eq!(format_number(0.1 * 3.0 * 10.0), "3");
        assert_eq!(format_number(0.000123), "0.000123");
        assert_eq!(format_number(1e15), "1000000000000000");
        assert_eq!(format_number(2f64.powi(64)), "18446744073709551616");
        assert_eq!(format_number(1e21), "1e21");
        assert_eq!(format_number(-2.5e300), "-2.5e300");
        assert_eq!(format_number(1.5e-7), "1.5e-7");
        assert_eq!(format_number(f64::INFINITY), "inf");
        assert_eq!(format_number(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_number(f64::NAN), "NaN");
    }
}
