//! Stop strings over streamed text: text is released as soon as it cannot be the start of a stop
//! string, and generation ends at the first stop string, which is not part of the output (as in
//! OpenAI's API and llama-server).

/// Watches streamed text for any of `stops`.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released: it ends with a prefix of some stop string.
    held: String,
}

/// What [`StopMatcher::push`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    /// Text that can go to the client now.
    pub text: String,
    /// A stop string was found: `text` ends right before it and generation must end.
    pub stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// Adds `text`; returns what can be released.
    pub fn push(&mut self, text: &str) -> Released {
        self.held.push_str(text);
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = found {
            let text = self.held[..at].to_string();
            self.held.clear();
            return Released {
                text,
                stopped: true,
            };
        }
        // Hold back the longest tail that starts some stop string.
        let keep = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len());
        let text = self.held[..keep].to_string();
        self.held.drain(..keep);
        Released {
            text,
            stopped: false,
        }
    }

    /// Ends the stream: whatever is held is released (no stop string completed).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_text_that_cannot_start_a_stop_string() {
        let mut m = StopMatcher::new(vec!["</end>".into(), "STOP".into()]);
        let r = m.push("Hello wor");
        assert_eq!((r.text.as_str(), r.stopped), ("Hello wor", false));
        let r = m.push("ld </e");
        assert_eq!(
            (r.text.as_str(), r.stopped),
            ("ld ", false),
            "'</e' is held"
        );
        let r = m.push("x> ST");
        assert_eq!((r.text.as_str(), r.stopped), ("</ex> ", false));
        assert_eq!(m.finish(), "ST");
    }

    #[test]
    fn stops_at_the_earliest_stop_string_across_pieces() {
        let mut m = StopMatcher::new(vec!["STOP".into(), "\n\n".into()]);
        assert_eq!(m.push("one S").text, "one ");
        let r = m.push("TOP two\n\nthree");
        assert_eq!((r.text.as_str(), r.stopped), ("", true));
        let mut m = StopMatcher::new(vec!["b".into(), "abc".into()]);
        let r = m.push("xxabc");
        assert_eq!(
            (r.text.as_str(), r.stopped),
            ("xx", true),
            "'abc' starts before 'b'"
        );
    }

    #[test]
    fn without_stop_strings_everything_passes_and_unicode_is_respected() {
        let mut m = StopMatcher::new(vec![String::new()]);
        assert_eq!(m.push("héllo").text, "héllo");
        let mut m = StopMatcher::new(vec!["é!".into()]);
        assert_eq!(m.push("café").text, "caf");
        assert_eq!(m.push("s").text, "és");
    }
}
