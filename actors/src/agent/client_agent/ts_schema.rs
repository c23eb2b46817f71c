//! Reads a TypeScript action schema (`schemaFile: {format: "ts", content}`, what TypeAgent's
//! Android client sends) into [`Decl`]s: every `type X = …` and `interface X {…}` (with or
//! without `export`), the comment group right above each declaration and field (line or
//! block comments, not separated from it by a blank line), and the type syntax action schemas
//! use — primitives, literals, object types, arrays (`T[]`, `Array<T>`), tuples, unions,
//! intersections, `Record<K, V>`, parentheses and references. Other statements (`import`,
//! `const`, …) are skipped. Anything else inside a declaration is an error naming its line
//! and column: the client learns why its registration was refused.
//!
//! Bounded: the input is the manifest (bounded by the caller) and nesting — objects,
//! parentheses, generic arguments and each `[]` — by [`MAX_TYPE_DEPTH`].

use serde_json::Value;

use super::schema::{Decl, Field, Type, MAX_TYPE_DEPTH};

/// One token, with the comment group written right above it.
#[derive(Debug, Clone, PartialEq)]
struct Token {
    /// What it is.
    kind: Kind,
    /// The comment lines right above it (no blank line between), joined with newlines.
    comment: Option<String>,
    /// A `//` comment that follows it on the same line (`time: string; // HH:mm`).
    trailing: Option<String>,
    /// 1-based line and column, for errors.
    at: (usize, usize),
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// An identifier or keyword.
    Ident(String),
    /// A string literal (quotes removed, escapes decoded).
    Str(String),
    /// A number literal.
    Num(f64),
    /// Any other character (`{`, `|`, `=`, …); `=>` is `'→'`.
    Punct(char),
}

/// Splits `src` into tokens with their comments. Errors name the line and column.
fn lex(src: &str) -> Result<Vec<Token>, String> {
    let mut lexer = Lexer {
        chars: src.chars().collect(),
        i: 0,
        line: 1,
        col: 1,
        tokens: Vec::new(),
        comment: Vec::new(),
        newlines: 0,
    };
    while let Some(c) = lexer.peek(0) {
        let at = (lexer.line, lexer.col);
        if c.is_whitespace() {
            lexer.whitespace();
        } else if c == '/' && lexer.peek(1) == Some('/') {
            lexer.line_comment();
        } else if c == '/' && lexer.peek(1) == Some('*') {
            lexer.block_comment(at)?;
        } else {
            let kind = lexer.token(c, at)?;
            let comment = std::mem::take(&mut lexer.comment);
            lexer.tokens.push(Token {
                kind,
                comment: (!comment.is_empty()).then(|| comment.join("\n")),
                trailing: None,
                at,
            });
            lexer.newlines = 0;
        }
    }
    Ok(lexer.tokens)
}

/// The tokenizer's state.
struct Lexer {
    /// The source.
    chars: Vec<char>,
    /// Position in `chars`.
    i: usize,
    /// 1-based line of `i`.
    line: usize,
    /// 1-based column of `i`.
    col: usize,
    /// Tokens so far.
    tokens: Vec<Token>,
    /// The comment group waiting for the next token.
    comment: Vec<String>,
    /// Newlines since the last token or comment: two mean a blank line, which detaches the
    /// comments above it.
    newlines: usize,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.i + ahead).copied()
    }

    /// Moves past one character, keeping line and column.
    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn whitespace(&mut self) {
        if self.bump() == Some('\n') {
            self.newlines += 1;
            if self.newlines >= 2 {
                self.comment.clear();
            }
        }
    }

    /// `// …`: trailing when on the line of the previous token, else one line of the group.
    fn line_comment(&mut self) {
        self.i += 2;
        self.col += 2;
        let start = self.i;
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.bump();
        }
        let text = self.chars[start..self.i]
            .iter()
            .collect::<String>()
            .trim()
            .to_string();
        match self.tokens.last_mut() {
            Some(Token { at, trailing, .. }) if at.0 == self.line && self.comment.is_empty() => {
                *trailing = Some(text);
            }
            _ => {
                self.comment.push(text);
                self.newlines = 0;
            }
        }
    }

    /// `/* … */` (and `/** … */`): each line, without its leading `*`, joins the group.
    fn block_comment(&mut self, at: (usize, usize)) -> Result<(), String> {
        self.bump();
        self.bump();
        let start = self.i;
        while !(self.peek(0) == Some('*') && self.peek(1) == Some('/')) {
            if self.bump().is_none() {
                return Err(format!(
                    "unterminated comment at line {}, column {}",
                    at.0, at.1
                ));
            }
        }
        let text: String = self.chars[start..self.i].iter().collect();
        self.bump();
        self.bump();
        for l in text.lines() {
            let l = l.trim().trim_start_matches('*').trim();
            if !l.is_empty() {
                self.comment.push(l.to_string());
            }
        }
        self.newlines = 0;
        Ok(())
    }

    /// The token starting with `c`.
    fn token(&mut self, c: char, at: (usize, usize)) -> Result<Kind, String> {
        let word = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
        Ok(if c == '"' || c == '\'' || c == '`' {
            self.string(c, at)?
        } else if c.is_ascii_digit() {
            let text = self.take_while(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_');
            let text: String = text.chars().filter(|c| *c != '_').collect();
            Kind::Num(
                text.parse().map_err(|_| {
                    format!("bad number {text:?} at line {}, column {}", at.0, at.1)
                })?,
            )
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            Kind::Ident(self.take_while(word))
        } else if c == '=' && self.peek(1) == Some('>') {
            self.bump();
            self.bump();
            Kind::Punct('→')
        } else {
            self.bump();
            Kind::Punct(c)
        })
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> String {
        let start = self.i;
        while self.peek(0).is_some_and(&f) {
            self.bump();
        }
        self.chars[start..self.i].iter().collect()
    }

    /// A string literal quoted with `quote` (template literals are read as plain strings).
    fn string(&mut self, quote: char, at: (usize, usize)) -> Result<Kind, String> {
        self.bump();
        let mut s = String::new();
        loop {
            let Some(ch) = self.bump() else {
                return Err(format!(
                    "unterminated string at line {}, column {}",
                    at.0, at.1
                ));
            };
            if ch == quote {
                return Ok(Kind::Str(s));
            }
            if ch != '\\' {
                s.push(ch);
                continue;
            }
            match self.bump() {
                Some('n') => s.push('\n'),
                Some('t') => s.push('\t'),
                Some('r') => s.push('\r'),
                Some(other) => s.push(other),
                None => {}
            }
        }
    }
}

/// Reads every type declaration of `src`.
pub fn parse(src: &str) -> Result<Vec<Decl>, String> {
    let mut p = Parser {
        tokens: lex(src)?,
        pos: 0,
    };
    let mut decls = Vec::new();
    while p.pos < p.tokens.len() {
        // The declaration's comment sits on its first token (`export`, `type`, `interface`).
        let comment = p.tokens[p.pos].comment.clone();
        let mut lookahead = p.pos;
        while matches!(p.ident_at(lookahead), Some("export" | "declare")) {
            lookahead += 1;
        }
        let is_decl = matches!(p.ident_at(lookahead), Some("type" | "interface"))
            && matches!(
                p.tokens.get(lookahead + 1).map(|t| &t.kind),
                Some(Kind::Ident(_))
            );
        if !is_decl {
            p.pos += 1;
            continue;
        }
        p.pos = lookahead;
        let decl = if p.ident_at(p.pos) == Some("type") {
            p.type_alias()?
        } else {
            p.interface()?
        };
        decls.push(Decl { comment, ..decl });
    }
    Ok(decls)
}

/// A recursive-descent reader over the tokens.
struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn ident_at(&self, pos: usize) -> Option<&str> {
        match self.tokens.get(pos).map(|t| &t.kind) {
            Some(Kind::Ident(s)) => Some(s),
            _ => None,
        }
    }

    fn peek_punct(&self, c: char) -> bool {
        matches!(self.tokens.get(self.pos), Some(Token { kind: Kind::Punct(p), .. }) if *p == c)
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let yes = self.peek_punct(c);
        if yes {
            self.pos += 1;
        }
        yes
    }

    /// An error at the current token.
    fn error(&self, what: &str) -> String {
        match self.tokens.get(self.pos) {
            Some(t) => {
                let found = match &t.kind {
                    Kind::Ident(s) => format!("'{s}'"),
                    Kind::Str(s) => format!("{s:?}"),
                    Kind::Num(n) => n.to_string(),
                    Kind::Punct('→') => "'=>'".to_string(),
                    Kind::Punct(c) => format!("'{c}'"),
                };
                format!(
                    "expected {what} at line {}, column {}, found {found}",
                    t.at.0, t.at.1
                )
            }
            None => format!("expected {what}, found the end of the schema"),
        }
    }

    fn expect_punct(&mut self, c: char) -> Result<(), String> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.error(&format!("'{c}'")))
        }
    }

    fn ident(&mut self) -> Result<String, String> {
        match self.ident_at(self.pos) {
            Some(s) => {
                let s = s.to_string();
                self.pos += 1;
                Ok(s)
            }
            None => Err(self.error("a name")),
        }
    }

    /// `<T, U extends X = Y>` after a declared name: skipped (generic parameters).
    fn skip_generics(&mut self) -> Result<(), String> {
        if !self.eat_punct('<') {
            return Ok(());
        }
        let mut depth = 1;
        while depth > 0 {
            match self.tokens.get(self.pos).map(|t| &t.kind) {
                Some(Kind::Punct('<')) => depth += 1,
                Some(Kind::Punct('>')) => depth -= 1,
                None => return Err(self.error("'>'")),
                _ => {}
            }
            self.pos += 1;
        }
        Ok(())
    }

    /// `type Name<…> = Type;`
    fn type_alias(&mut self) -> Result<Decl, String> {
        self.pos += 1; // `type`
        let name = self.ident()?;
        self.skip_generics()?;
        self.expect_punct('=')?;
        let ty = self.ty(0)?;
        self.eat_punct(';');
        Ok(Decl {
            name,
            comment: None,
            ty,
        })
    }

    /// `interface Name<…> extends A, B { … }`
    fn interface(&mut self) -> Result<Decl, String> {
        self.pos += 1; // `interface`
        let name = self.ident()?;
        self.skip_generics()?;
        let mut parts = Vec::new();
        if self.ident_at(self.pos) == Some("extends") {
            self.pos += 1;
            loop {
                parts.push(self.primary(0)?);
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        self.expect_punct('{')?;
        let body = self.object_body(0)?;
        let ty = if parts.is_empty() {
            body
        } else {
            parts.push(body);
            Type::Intersection(parts)
        };
        Ok(Decl {
            name,
            comment: None,
            ty,
        })
    }

    /// `A | B`, with an optional leading `|`.
    fn ty(&mut self, depth: usize) -> Result<Type, String> {
        if depth > MAX_TYPE_DEPTH {
            return Err(self.error("a less deeply nested type"));
        }
        self.eat_punct('|');
        let mut members = vec![self.intersection(depth)?];
        while self.eat_punct('|') {
            members.push(self.intersection(depth)?);
        }
        Ok(if members.len() == 1 {
            members.pop().expect("one")
        } else {
            Type::Union(members)
        })
    }

    fn intersection(&mut self, depth: usize) -> Result<Type, String> {
        self.eat_punct('&');
        let mut parts = vec![self.postfix(depth)?];
        while self.eat_punct('&') {
            parts.push(self.postfix(depth)?);
        }
        Ok(if parts.len() == 1 {
            parts.pop().expect("one")
        } else {
            Type::Intersection(parts)
        })
    }

    /// A primary type followed by `[]`s (each one more level of nesting).
    fn postfix(&mut self, depth: usize) -> Result<Type, String> {
        let mut ty = self.primary(depth)?;
        let mut depth = depth;
        while self.peek_punct('[')
            && matches!(
                self.tokens.get(self.pos + 1).map(|t| &t.kind),
                Some(Kind::Punct(']'))
            )
        {
            depth += 1;
            if depth > MAX_TYPE_DEPTH {
                return Err(self.error("a less deeply nested type"));
            }
            self.pos += 2;
            ty = Type::Array(Box::new(ty));
        }
        Ok(ty)
    }

    fn primary(&mut self, depth: usize) -> Result<Type, String> {
        let d = depth + 1;
        let Some(token) = self.tokens.get(self.pos).cloned() else {
            return Err(self.error("a type"));
        };
        self.pos += 1;
        Ok(match token.kind {
            Kind::Str(s) => Type::Literal(Value::String(s)),
            Kind::Num(n) => Type::Literal(number(n)),
            Kind::Punct('-') => match self.tokens.get(self.pos).map(|t| &t.kind) {
                Some(Kind::Num(n)) => {
                    let n = -*n;
                    self.pos += 1;
                    Type::Literal(number(n))
                }
                _ => {
                    self.pos -= 1;
                    return Err(self.error("a type"));
                }
            },
            Kind::Punct('{') => self.object_body(d)?,
            Kind::Punct('(') => {
                let ty = self.ty(d)?;
                self.expect_punct(')')?;
                ty
            }
            Kind::Punct('[') => {
                let mut items = Vec::new();
                while !self.eat_punct(']') {
                    items.push(self.ty(d)?);
                    if !self.eat_punct(',') {
                        self.expect_punct(']')?;
                        break;
                    }
                }
                Type::Tuple(items)
            }
            Kind::Ident(name) => self.named(name, d)?,
            Kind::Punct(_) => {
                self.pos -= 1;
                return Err(self.error("a type"));
            }
        })
    }

    /// A keyword type, `Array<T>`, `Record<K, V>` or a reference (generic arguments of other
    /// references are read and dropped: the schema says what the type is, not them).
    fn named(&mut self, name: String, depth: usize) -> Result<Type, String> {
        let args = if self.eat_punct('<') {
            let mut args = vec![self.ty(depth)?];
            while self.eat_punct(',') {
                args.push(self.ty(depth)?);
            }
            self.expect_punct('>')?;
            args
        } else {
            Vec::new()
        };
        Ok(match (name.as_str(), args.len()) {
            ("string", 0) => Type::String,
            ("number" | "bigint", 0) => Type::Number,
            ("boolean", 0) => Type::Boolean,
            ("true", 0) => Type::Literal(Value::Bool(true)),
            ("false", 0) => Type::Literal(Value::Bool(false)),
            ("null", 0) => Type::Null,
            ("undefined" | "void" | "never", 0) => Type::Undefined,
            ("any" | "unknown" | "object" | "Object", 0) => Type::Any,
            ("Array" | "ReadonlyArray", 1) => {
                Type::Array(Box::new(args.into_iter().next().expect("one")))
            }
            ("Record", 2) => Type::Object {
                fields: Vec::new(),
                rest: Some(Box::new(args.into_iter().nth(1).expect("two"))),
            },
            (_, 0) => Type::Ref(name),
            _ => Type::Any,
        })
    }

    /// The members of `{ … }` up to and including its `}`.
    fn object_body(&mut self, depth: usize) -> Result<Type, String> {
        let mut fields = Vec::new();
        let mut rest = None;
        loop {
            if self.eat_punct('}') {
                break;
            }
            let comment = self.tokens.get(self.pos).and_then(|t| t.comment.clone());
            if self.ident_at(self.pos) == Some("readonly")
                && !matches!(
                    self.tokens.get(self.pos + 1).map(|t| &t.kind),
                    Some(Kind::Punct(':' | '?'))
                )
            {
                self.pos += 1;
            }
            if self.eat_punct('[') {
                // Index signature: `[key: string]: T`.
                self.ident()?;
                self.expect_punct(':')?;
                self.ty(depth + 1)?;
                self.expect_punct(']')?;
                self.expect_punct(':')?;
                rest = Some(Box::new(self.ty(depth + 1)?));
            } else {
                let name = match self.tokens.get(self.pos).map(|t| &t.kind) {
                    Some(Kind::Ident(s) | Kind::Str(s)) => s.clone(),
                    _ => return Err(self.error("a field name or '}'")),
                };
                self.pos += 1;
                let optional = self.eat_punct('?');
                self.expect_punct(':')?;
                let ty = self.ty(depth + 1)?;
                fields.push(Field {
                    name,
                    optional,
                    ty,
                    comment,
                });
            }
            if !self.eat_punct(';') && !self.eat_punct(',') && !self.peek_punct('}') {
                return Err(self.error("';', ',' or '}'"));
            }
            // `field: T; // what it is` describes the field too.
            let trailing = self.tokens[self.pos - 1].trailing.clone();
            if let (Some(t), Some(field)) = (trailing, fields.last_mut()) {
                field.comment = Some(match field.comment.take() {
                    Some(c) => format!("{c}\n{t}"),
                    None => t,
                });
            }
        }
        Ok(Type::Object { fields, rest })
    }
}

fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}
