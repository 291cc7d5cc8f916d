"""``strom ksql-migrations`` without a server: a migration file split into its
statements as ksqlDB's tool splits it, the statements a migration may not hold, the
files' names, versions and checksums, ``info``'s table, the project ``new-project``
writes and ``create``'s files, and a bad argument or config value as one line and a
non-zero exit code."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from strom.cli.main import main
from strom.ksql import migrations as mg


def test_split_sql_drops_comments_and_keeps_quoted_text_whole() -> None:
    text = (
        "-- a comment; not a statement\n"
        "CREATE STREAM s (v STRING) WITH (kafka_topic='a;b', value_format='JSON');\n"
        "/* a block; comment */INSERT INTO s (v) VALUES ('it''s -- here');\n"
    )
    assert mg.split_sql(text) == [
        "CREATE STREAM s (v STRING) WITH (kafka_topic='a;b', value_format='JSON');",
        "\nINSERT INTO s (v) VALUES ('it''s -- here');",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DROP STREAM s;\nDROP STREAM t", "Unmatched command at end of file; missing "
         "semicolon: '\nDROP STREAM t'"),
        ("INSERT INTO s VALUES ('x);", "Invalid sql - failed to find closing token '''"),
        ("/* open; ", "Invalid sql - failed to find closing token '*/'"),
    ],
)  # fmt: skip
def test_split_sql_refuses_what_is_left_open(text: str, message: str) -> None:
    with pytest.raises(mg.MigrationError) as refused:
        mg.split_sql(text)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("statement", "word"),
    [("select * from s;", "SELECT"), ("\n  SHOW STREAMS;", "SHOW"), ("describe s;", "DESCRIBE"),
     ("LIST TOPICS;", "LIST"), ("PRINT 'topic';", "PRINT"), ("EXPLAIN q;", "EXPLAIN"),
     ("RUN SCRIPT 'x.sql';", "RUN SCRIPT")],
)  # fmt: skip
def test_queries_listings_and_run_script_are_not_supported(statement: str, word: str) -> None:
    with pytest.raises(mg.MigrationError) as refused:
        mg.check_supported(statement)
    assert str(refused.value) == f"'{word}' statements are not supported."
    mg.check_supported("CREATE STREAM s AS SELECT * FROM t;")  # a query inside is fine


def test_files_versions_names_and_checksums(tmp_path: Path) -> None:
    assert mg.new_file_name(7, 'add "users"/orders now') == "V000007__add__users__orders_now.sql"
    (tmp_path / "V000002__second_one.sql").write_text("DROP STREAM s;\n")
    (tmp_path / "V000001__first.sql").write_text("")
    (tmp_path / "notes.txt").write_text("")
    skipped: list[str] = []
    found = mg.all_migrations(str(tmp_path), skipped)
    assert [(m.version, m.name) for m in found] == [(1, "first"), (2, "second one")]
    assert skipped == [
        "Skipping file does not match expected migration file pattern "
        "'V<six digit number>__<name>.sql': notes.txt"
    ]
    assert mg.migration_for_version(2, str(tmp_path)) == found[1]
    assert mg.migration_for_version(3, str(tmp_path)) is None
    assert mg.checksum(found[1].path) == hashlib.md5(b"DROP STREAM s;\n").hexdigest()
    (tmp_path / "V000002__again.sql").write_text("")
    with pytest.raises(mg.MigrationError, match="Found multiple migration files with the same"):
        mg.all_migrations(str(tmp_path))


def test_info_table_as_ksqldb_prints_it() -> None:
    migrated = mg.VersionInfo(1, "abc", "<none>", "MIGRATED", "add users", "", "", "N/A")
    pending = mg.VersionInfo.pending(mg.MigrationFile(2, "add orders", "V000002__add_orders.sql"))
    assert mg.format_versions([migrated, pending]).splitlines() == [
        "-" * 95,
        " Version | Name       | State    | Previous Version | Started On | Completed On "
        "| Error Reason ",
        "-" * 95,
        " 1       | add users  | MIGRATED | <none>           |            |              "
        "| N/A          ",
        " 2       | add orders | PENDING  | N/A              | N/A        | N/A          "
        "| N/A          ",
        "-" * 95,
    ]


def test_new_project_and_create(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    assert main(["ksql-migrations", "new-project", str(project), "http://localhost:8088"]) == 0
    properties = (project / "ksql-migrations.properties").read_text()
    assert properties.startswith("ksql.server.url=http://localhost:8088\n\n")
    assert "# ksql.migrations.stream.name=MIGRATION_EVENTS\n" in properties
    assert "# ksql.migrations.table.topic.name=ksql-service-idksql_MIGRATION_SCHEMA_VERSIONS\n" in (
        properties
    )
    assert (project / "migrations").is_dir()
    config = str(project / "ksql-migrations.properties")
    assert main(["ksql-migrations", "-c", config, "create", "first one"]) == 0
    assert main(["ksql-migrations", "create", "-c", config, "later", "-v", "12"]) == 0
    assert main(["ksql-migrations", "create", "next", "--config-file", config]) == 0
    names = sorted(p.name for p in (project / "migrations").iterdir())
    assert names == ["V000001__first_one.sql", "V000012__later.sql", "V000013__next.sql"]
    capsys.readouterr()
    assert main(["ksql-migrations", "-c", config, "create", "again", "-v", "12"]) == 1
    err = capsys.readouterr().err
    assert err == f"Found existing migrations file for version 12: {project}/migrations/" \
        "V000012__later.sql\n"  # fmt: skip
    # new-project again: the directories are there, the config file is not overwritten
    assert main(["ksql-migrations", "new-project", str(project), "http://other:8088"]) == 1
    assert capsys.readouterr().err.endswith(
        f"Failed to create file. File already exists: {config}\n"
    )


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["apply", "--all"], 1, "Migrations config file required but not specified. "
         "Specify with --config-file (or, equivalently, -c).\n"),
        (["-c", "ksql-migrations.properties", "new-project", "p", "http://h:1"], 1,
         "This command does not expect a config file to be passed. Rather, this command will "
         "create one as part of preparing the migrations directory.\n"),
        (["-c", "{config}", "apply", "--all", "--next"], 2, "strom ksql-migrations apply: "
         "error: argument -n/--next: not allowed with argument -a/--all "
         "(see strom ksql-migrations apply --help)\n"),
        (["-c", "{config}", "apply", "--until", "0"], 2, "strom ksql-migrations apply: error: "
         "argument -u/--until: 0 is not a version from 1 to 999999 "
         "(see strom ksql-migrations apply --help)\n"),
        (["-c", "{config}", "apply", "--all", "-d", "a=b=c"], 2, "strom ksql-migrations apply: "
         "error: argument -d/--define: Failed to parse argument a=b=c: variables must be "
         "defined using '=' (i.e. var=val). (see strom ksql-migrations apply --help)\n"),
        (["-c", "{missing}", "info"], 1, "Missing required property: ksql.server.url\n"),
        (["-c", "{replicas}", "info"], 1, "Invalid value two for configuration "
         "ksql.migrations.topic.replicas: Not a number of type INT\n"),
        (["-c", "{bad_url}", "info"], 1, "Invalid ksql server URL: localhost:8088\n"),
        (["-c", "{unreachable}", "info"], 1, "Failed to query http://127.0.0.1:1/info: "
         "cannot reach http://127.0.0.1:1: [Errno 111] Connection refused\n"),
    ],
)  # fmt: skip
def test_bad_arguments_and_config_are_one_line(
    argv: list[str], code: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        "config": "ksql.server.url=http://127.0.0.1:1\n",
        "missing": "ksql.migrations.stream.name=S\n",
        "replicas": "ksql.server.url=http://127.0.0.1:1\nksql.migrations.topic.replicas=two\n",
        "bad_url": "ksql.server.url=localhost:8088\n",
        "unreachable": "ksql.server.url=http://127.0.0.1:1\n",
    }
    paths = {}
    for name, text in files.items():
        (tmp_path / f"{name}.properties").write_text(text)
        paths[name] = str(tmp_path / f"{name}.properties")
    args = [arg.format(**paths) for arg in argv]
    try:
        result = main(["ksql-migrations", *args])
    except SystemExit as exc:  # argparse's own exit
        result = int(exc.code or 0)
    assert result == code
    captured = capsys.readouterr()
    assert captured.err == message


def test_the_servers_client_takes_basic_auth_tls_and_headers(tmp_path: Path) -> None:
    from strom.cli.ksql_migrations import _client

    def config(**properties: str) -> mg.MigrationConfig:
        values = {key.replace("_", "."): value for key, value in properties.items()}
        return mg.MigrationConfig.of(values, str(tmp_path / "ksql-migrations.properties"))

    basic = _client(
        config(ksql_server_url="http://h:1", ksql_auth_basic_username="u",
               ksql_auth_basic_password="p"), None
    )  # fmt: skip
    assert basic.headers == {"Authorization": "Basic dTpw"} and basic.context is None
    headers = tmp_path / "headers.properties"
    headers.write_text("X-Request-Id: abc\n")
    assert _client(config(ksql_server_url="http://h:1"), str(headers)).headers == {
        "X-Request-Id": "abc"
    }
    tls = _client(config(ksql_server_url="https://h:1", ssl_verify_host="false"), None)
    assert tls.context is not None and not tls.context.check_hostname
    with pytest.raises(mg.MigrationError) as refused:
        _client(config(ksql_server_url="https://h:1", ssl_truststore_location="/no.pem"), None)
    assert str(refused.value) == (
        "ssl.truststore.location: cannot read /no.pem: No such file or directory"
    )
    with pytest.raises(mg.MigrationError) as refused:
        _client(config(ksql_server_url="http://h:1"), str(tmp_path / "missing"))
    assert str(refused.value) == f"Could not parse headers file '{tmp_path / 'missing'}'."
    assert config(ksql_server_url="http://h:1").migrations_dir == str(tmp_path / "migrations")
