use super::*;

#[test]
fn echo_uses_the_last_user_text() {
    let items = vec![
        json!({"role": "developer", "content": "sys"}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "first"}]}),
        json!({"role": "user", "content": "second"}),
        json!({"type": "function_call_output", "call_id": "c", "output": "x"}),
    ];
    assert_eq!(last_user_text(&items).as_deref(), Some("second"));
    let long = vec![json!({"role": "user", "content": "x".repeat(100)})];
    assert_eq!(reply_text(3, "org-a", &long), format!("SIM-REPLY #3 from org-a: {}", "x".repeat(60)));
}
