//! The policy worker on its own (the gateway runs the same loop as `quarry policy-worker`).

fn main() -> std::io::Result<()> {
    quarry_policy_prolog::run_worker()
}
