//! Integration tests of pspat-config.

/// Bad input: one error each, at the right line, column and token.
mod bad_input;
/// Control commands parse into messages.
mod control;
/// diff/apply between generated valid plans.
mod diff;
/// The complete example of docs/CONFIG.md loads and validates.
mod doc_example;
/// Every example of ipfw(8) parses and prints back in the normal form.
mod examples;
/// dummynet's fq_codel sched type, from the text to the plan.
mod fq_codel;
/// dummynet's pie AQM and fq_pie sched type, from the text to the plan.
mod pie;
/// `type` on pipes: dummynet's pipe scheduler, from the text to the plan.
mod pipe_type;
/// parse(print(x)) == x for generated models, in both syntaxes; no panic on random text.
mod roundtrip;
/// ipfw's rule comment, kept, printed, refused when it cannot be.
mod rule_comment;
/// ipfw's `dscp` rule option, read, printed and refused out of range.
mod rule_dscp;
/// ipfw's `iplen`, `tcpflags`, `setup` and `established`, read, printed and refused.
mod rule_header;
/// ipfw's `prob` on rules, read, printed and refused out of range.
mod rule_prob;
/// Proptest strategies for models.
mod strategies;
/// What the syntax tests share: parsing, validating, where an error is.
mod support;
/// `table N create` and several entries on one `add`, as modern ipfw writes them.
mod table_create;
