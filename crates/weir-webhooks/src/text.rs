//! Text from elsewhere (an answer's body, a message, evidence) cut to fit where it goes: a hook
//! result, a Slack field, a Discord embed.

/// At most `max` characters (not bytes: never splits a character), with an ellipsis when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_characters_and_marks_the_cut() {
        assert_eq!(truncate("héllo", 5), "héllo");
        assert_eq!(truncate("héllo wörld", 5), "héll…");
    }
}
