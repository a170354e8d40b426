//! `runway team list|show|set|delete`: teams, whose members (people by name, or a sign-in
//! provider's groups) have a role on every service the team owns. An admin makes them; a
//! service is given to a team with `runway services update NAME --team TEAM`.

use std::process::ExitCode;

use crate::api::{PutTeam, RoleName, TeamMemberView, TeamView};
use crate::local::table;
use crate::platform::{OutputArg, client, print_json, tokio};
use crate::terminal;
use crate::{Output, print_stdout};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TeamCommand {
    /// List the teams this token sees (an admin's: all), with their members and services.
    List(OutputArg),
    /// Show one team.
    Show(NameArgs),
    /// Make a team, or replace its members (admin token).
    ///
    /// Each `--member` is `SUBJECT=ROLE` or `SUBJECT=ROLE@ENV,ENV`: SUBJECT is `user:NAME` (a
    /// person, as the sign-in provider names them) or `group:PATH` (everyone in a group of
    /// the provider, e.g. `group:acme/payments`); ROLE is `viewer`, `deployer` or
    /// `maintainer`; without `@` the role holds in every environment.
    Set(SetArgs),
    /// Remove a team (admin token); refused while it owns services. Its tokens are revoked.
    Delete(NameArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct NameArgs {
    /// The team's name.
    name: String,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SetArgs {
    /// The team's name (a DNS label).
    name: String,
    /// A member: `user:NAME=ROLE`, `group:PATH=ROLE@staging,production`. Repeat for several;
    /// none makes a team with no one in it.
    #[arg(long = "member", value_name = "SUBJECT=ROLE[@ENVS]", value_parser = parse_member)]
    members: Vec<TeamMemberView>,
    #[command(flatten)]
    output: OutputArg,
}

/// `SUBJECT=ROLE[@ENV,ENV]`.
fn parse_member(text: &str) -> Result<TeamMemberView, String> {
    let (subject, rest) = text.rsplit_once('=').ok_or_else(|| {
        format!("expected SUBJECT=ROLE (`group:acme/payments=deployer`), not {text:?}")
    })?;
    if !(subject.starts_with("user:") || subject.starts_with("group:")) {
        return Err(format!(
            "the member {subject:?} is `user:NAME` or `group:PATH`"
        ));
    }
    let (role, environments) = match rest.split_once('@') {
        Some((role, envs)) => (
            role,
            Some(
                envs.split(',')
                    .map(str::trim)
                    .map(str::to_owned)
                    .collect::<Vec<_>>(),
            ),
        ),
        None => (rest, None),
    };
    let role = match role.trim() {
        "viewer" => RoleName::Viewer,
        "deployer" => RoleName::Deployer,
        "maintainer" => RoleName::Maintainer,
        other => {
            return Err(format!(
                "unknown role {other:?}: use viewer, deployer or maintainer"
            ));
        }
    };
    if environments
        .as_ref()
        .is_some_and(|envs| envs.iter().any(String::is_empty))
    {
        return Err(format!("an empty environment in {text:?}"));
    }
    Ok(TeamMemberView {
        subject: subject.to_owned(),
        role,
        environments,
    })
}

pub(crate) fn team(command: &TeamCommand) -> anyhow::Result<ExitCode> {
    let client = client()?;
    let rt = tokio()?;
    match command {
        TeamCommand::List(output) => {
            let teams = rt.block_on(client.teams())?;
            match output.output {
                Output::Json => print_json(&teams)?,
                Output::Text if teams.is_empty() => print_stdout("no teams\n"),
                Output::Text => {
                    let mut rows = vec![[
                        "TEAM".to_owned(),
                        "MEMBERS".to_owned(),
                        "SERVICES".to_owned(),
                    ]];
                    for t in &teams {
                        rows.push([
                            t.name.clone(),
                            t.members.len().to_string(),
                            if t.services.is_empty() {
                                "-".to_owned()
                            } else {
                                terminal::line(&t.services.join(", ")).into_owned()
                            },
                        ]);
                    }
                    print_stdout(&table(&rows));
                }
            }
        }
        TeamCommand::Show(args) => {
            let team = rt.block_on(client.team(&args.name))?;
            show(&team, &args.output)?;
        }
        TeamCommand::Set(args) => {
            let team = rt.block_on(client.put_team(
                &args.name,
                &PutTeam {
                    members: args.members.clone(),
                },
            ))?;
            show(&team, &args.output)?;
        }
        TeamCommand::Delete(args) => {
            rt.block_on(client.delete_team(&args.name))?;
            match args.output.output {
                Output::Json => print_json(&serde_json::json!({ "deleted": args.name }))?,
                Output::Text => print_stdout(&format!("deleted team {}\n", args.name)),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn show(team: &TeamView, output: &OutputArg) -> anyhow::Result<()> {
    if output.output == Output::Json {
        return print_json(team);
    }
    let mut text = format!(
        "team {} (services: {})\n",
        team.name,
        if team.services.is_empty() {
            "none yet".to_owned()
        } else {
            team.services.join(", ")
        }
    );
    if team.members.is_empty() {
        text.push_str("no members\n");
    } else {
        let mut rows = vec![[
            "MEMBER".to_owned(),
            "ROLE".to_owned(),
            "ENVIRONMENTS".to_owned(),
        ]];
        for m in &team.members {
            rows.push([
                terminal::line(&m.subject).into_owned(),
                match m.role {
                    RoleName::Viewer => "viewer",
                    RoleName::Deployer => "deployer",
                    RoleName::Maintainer => "maintainer",
                }
                .to_owned(),
                m.environments
                    .as_ref()
                    .map_or_else(|| "every one".to_owned(), |e| e.join(", ")),
            ]);
        }
        text.push_str(&table(&rows));
    }
    print_stdout(&text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_parse_with_their_roles_and_environments() {
        let m = parse_member("group:acme/payments=deployer@staging,production").unwrap();
        assert_eq!(m.subject, "group:acme/payments");
        assert_eq!(m.role, RoleName::Deployer);
        assert_eq!(
            m.environments,
            Some(vec!["staging".to_owned(), "production".to_owned()])
        );
        let m = parse_member("user:alice=maintainer").unwrap();
        assert_eq!((m.role, m.environments), (RoleName::Maintainer, None));
        for (bad, says) in [
            ("alice=viewer", "`user:NAME` or `group:PATH`"),
            ("user:alice", "SUBJECT=ROLE"),
            ("user:alice=owner", "unknown role"),
            ("user:alice=viewer@staging,", "empty environment"),
        ] {
            let refused = parse_member(bad).unwrap_err();
            assert!(refused.contains(says), "{bad}: {refused}");
        }
    }
}
