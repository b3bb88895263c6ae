//! `runner plan`: validate a recipe and show what a run would do, as text, JSON or Graphviz dot.

use runner_plugin::size::format_size;
use serde_json::json;

use super::record;
use super::{Compiled, EXIT_USAGE, PlanArgs, PlanFormat, compile};
use crate::registry::Registry;

pub fn plan(registry: &Registry, args: PlanArgs) -> anyhow::Result<u8> {
    let Some(mut compiled) = compile(registry, &args.recipe) else { return Ok(EXIT_USAGE) };
    let db = args.db.clone().unwrap_or_else(record::default_db);
    if let Some(store) = record::open_for_reading(&db)? {
        record::learn(&store, &mut compiled);
    }
    let text = match args.format {
        PlanFormat::Text => text(&compiled),
        PlanFormat::Json => serde_json::to_string_pretty(&to_json(&compiled))? + "\n",
        PlanFormat::Dot => dot(&compiled),
    };
    print!("{text}");
    if let Some(limit) = crate::budget::memory_limit() {
        super::run_cmd::refuse_oversized(&compiled, limit)?;
    }
    Ok(0)
}

fn over_names(compiled: &Compiled, step: usize) -> Vec<&str> {
    compiled.recipe.steps[step].over.iter().map(|&d| compiled.recipe.dims[d].name.as_str()).collect()
}

fn text(compiled: &Compiled) -> String {
    let Compiled { recipe, graph, plan } = compiled;
    let mut rows = vec![[
        "step".to_string(),
        "plugin".into(),
        "over".into(),
        "tasks".into(),
        "output".into(),
        "estimate/task".into(),
        "source".into(),
    ]];
    for (id, step) in recipe.steps.iter().enumerate() {
        let p = &plan.steps[id];
        let over = over_names(compiled, id);
        rows.push([
            step.name.clone(),
            step.plugin.name().to_string(),
            if over.is_empty() { "-".into() } else { over.join(",") },
            p.tasks.to_string(),
            p.output.to_string(),
            format_size(p.estimate),
            match &p.model {
                Some(m) => format!("history: {m}"),
                None => p.source.to_string(),
            },
        ]);
    }
    let mut out = format!(
        "recipe {} (cycle {}): {} steps, {} tasks\n",
        recipe.name,
        recipe.cycle,
        recipe.steps.len(),
        graph.total_tasks()
    );
    out.push_str(&super::table(&rows, &[3, 5]));
    if let Some((step, bytes)) = plan.largest_task() {
        out.push_str(&format!(
            "largest task: {} at {} ({})\n",
            recipe.steps[step].name,
            format_size(bytes),
            plan.steps[step].source
        ));
    }
    out
}

fn to_json(compiled: &Compiled) -> serde_json::Value {
    let Compiled { recipe, graph, plan } = compiled;
    let steps: Vec<_> = recipe
        .steps
        .iter()
        .enumerate()
        .map(|(id, step)| {
            let p = &plan.steps[id];
            let inputs: Vec<_> = graph.steps[id]
                .inputs
                .iter()
                .map(|&e| {
                    let edge = &graph.edges[e];
                    json!({
                        "name": step.inputs[edge.input].name,
                        "step": recipe.steps[edge.producer].name,
                        "gathered": edge.gathered.then(|| graph.largest_gather(e)),
                    })
                })
                .collect();
            json!({
                "name": step.name,
                "plugin": step.plugin.name(),
                "over": over_names(compiled, id),
                "tasks": p.tasks,
                "inputs": inputs,
                "output": p.output.to_string(),
                "output_bytes": p.output.bytes(),
                "estimate_bytes": p.estimate,
                "estimate_source": p.source.as_str(),
                "history_tasks": p.model.as_ref().map(|m| m.tasks),
                "history_runs": p.model.as_ref().map(|m| m.runs),
                "plugin_estimate_bytes": p.plugin_estimate,
            })
        })
        .collect();
    let largest =
        plan.largest_task().map(|(step, bytes)| json!({"step": recipe.steps[step].name, "estimate_bytes": bytes}));
    json!({
        "recipe": recipe.name,
        "cycle": recipe.cycle,
        "tasks_total": graph.total_tasks(),
        "steps": steps,
        "largest_task": largest,
    })
}

fn dot(compiled: &Compiled) -> String {
    let Compiled { recipe, graph, plan } = compiled;
    let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = format!("digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box];\n", quote(&recipe.name));
    for (id, step) in recipe.steps.iter().enumerate() {
        let over = over_names(compiled, id);
        out.push_str(&format!(
            "  s{id} [label=\"{}\\n{} × {}\\n{} / task\"];\n",
            quote(&step.name),
            quote(step.plugin.name()),
            plan.steps[id].tasks,
            format_size(plan.steps[id].estimate),
        ));
        if !over.is_empty() {
            out.push_str(&format!("  s{id} [tooltip=\"over {}\"];\n", quote(&over.join(", "))));
        }
    }
    for edge in &graph.edges {
        let name = &recipe.steps[edge.consumer].inputs[edge.input].name;
        let style = if edge.gathered { ", style=bold" } else { "" };
        out.push_str(&format!(
            "  s{} -> s{} [label=\"{}{}\"{style}];\n",
            edge.producer,
            edge.consumer,
            quote(name),
            if edge.gathered { " (gather)" } else { "" }
        ));
    }
    out.push_str("}\n");
    out
}
