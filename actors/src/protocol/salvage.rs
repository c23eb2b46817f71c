//! Reading the channel and callId out of an invoke whose text does not parse as JSON, so it
//! can still be answered (`Invalid invoke message: …`) instead of dropped. Used by
//! [`Inbound::parse`](super::Inbound::parse) only.

use super::MAX_SAFE_INTEGER;

/// Reads the channel and callId of an invoke from text that does not parse as JSON, without
/// building values and without recursion (the text may nest arbitrarily deep). `None` unless
/// the top level is an object whose `name` is a valid string and whose `message` object says
/// `"type":"invoke"` with a valid callId.
pub fn salvage_invoke(text: &str) -> Option<(String, u64)> {
    let mut sc = Scanner {
        b: text.as_bytes(),
        i: 0,
    };
    let (mut channel, mut kind, mut call_id) = (None, None, None);
    sc.object(|sc, key| {
        match key {
            b"name" if sc.peek() == Some(b'"') => {
                channel = Some(sc.string()?);
            }
            b"message" if sc.peek() == Some(b'{') => {
                sc.object(|sc, key| {
                    match key {
                        b"type" if sc.peek() == Some(b'"') => kind = Some(sc.string()?),
                        b"callId" => call_id = Some(sc.number()?),
                        _ => sc.skip_value()?,
                    }
                    Some(())
                })?;
            }
            _ => sc.skip_value()?,
        }
        Some(())
    })?;
    let channel: String = serde_json::from_slice(channel?).ok()?;
    let call_id = call_id
        .and_then(|n: &[u8]| std::str::from_utf8(n).ok()?.parse::<u64>().ok())
        .filter(|n| *n <= MAX_SAFE_INTEGER)?;
    (kind? == b"\"invoke\"").then_some((channel, call_id))
}

/// A forward-only JSON tokenizer for [`salvage_invoke`]: strings come back raw (quotes
/// included), containers are skipped with a depth counter.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// A string token, quotes included (escapes are skipped, not checked).
    fn string(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let start = self.i;
        self.eat(b'"')?;
        loop {
            match *self.b.get(self.i)? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(&self.b[start..self.i]);
                }
                _ => self.i += 1,
            }
        }
    }

    fn number(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let start = self.i;
        while self.i < self.b.len()
            && matches!(
                self.b[self.i],
                b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'
            )
        {
            self.i += 1;
        }
        (self.i > start).then(|| &self.b[start..self.i])
    }

    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.b.get(self.i)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while self.i < self.b.len() && !matches!(self.b[self.i], b',' | b'}' | b']') {
                    self.i += 1;
                }
                Some(())
            }
        }
    }

    /// `{ "key": value, … }`, calling `field` with each key (unquoted) to consume its value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, &key[1..key.len() - 1])?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}
