//! `stock:proxy-filter`: a tool is allowed iff it matches some `allow` glob (default `["*"]`) and
//! no `deny` glob. TODO(helper): implement.
use hpcgate_policy_sdk::{Call, Decision, Policy};

pub struct ToolFilter;

impl Policy for ToolFilter {
    fn configure(_settings: &str) -> Result<Self, String> {
        Ok(ToolFilter)
    }
    fn evaluate(&self, _call: &Call) -> Decision {
        Decision::allow()
    }
}

hpcgate_policy_sdk::export_policy!(ToolFilter);
