//! `idem matrix --source mqtt`: the receive rules against a device reset at every crash
//! point, each QoS with its identifiers in RAM and in flash, for the stores MQTT takes
//! (`idem_mqtt::sim`: a broker that keeps the session and resends what was not
//! acknowledged).

use std::io::Write;

use idem_mqtt::receiver::{Keep, Release};
use idem_mqtt::sim::{self, Cell, ROWS};
use idem_payments::registry::{self, Source, SumStoreJob};
use serde_json::json;

use idem_lab::select::{StoreKind, WINDOW};

/// A row of the matrix: the QoS, where the identifiers are kept, when a release is written.
type Row = (idem_mqtt::codec::QoS, Keep, Release);

struct Sweep(Row);

impl SumStoreJob for Sweep {
    type Out = Cell;
    fn call<S: idem_payments::Sum + Send + Sync>(self, store: S) -> Cell {
        sim::sweep(store, sim::setup(self.0))
    }
}

fn row_name(row: (idem_mqtt::codec::QoS, Keep, Release)) -> String {
    let (qos, keep, release) = row;
    match (qos.level(), keep, release) {
        (2, Keep::Ram, _) => "QoS 2, in RAM".into(),
        (2, Keep::Flash, Release::Now) => "QoS 2, in flash".into(),
        (2, Keep::Flash, Release::WithNext) => "QoS 2, with next".into(),
        (n, ..) => format!("QoS {n}"),
    }
}

/// Prints the table (or its JSON).
pub fn print(out: &mut impl Write, json: bool) -> anyhow::Result<()> {
    let stores: Vec<StoreKind> = StoreKind::on(Source::Mqtt).collect();
    let mut rows = Vec::new();
    for row in ROWS {
        let cells = stores
            .iter()
            .map(|&s| {
                registry::with_mqtt_store(s, WINDOW, Sweep(row))
                    .expect("an MQTT store")
                    .map_err(|e| anyhow::anyhow!("{e:?}"))
            })
            .collect::<anyhow::Result<Vec<Cell>>>()?;
        rows.push((row, cells));
    }
    if json {
        return print_json(out, &stores, &rows);
    }
    writeln!(
        out,
        "MQTT: 30 messages ({} in all), 4 in flight at QoS 1 and 2; the device reset once\n\
at every flash write and erase of a run and after each of its records, before its\n\
acknowledgement; the broker keeps the session and sends again what was not\n\
acknowledged. A cell: the resets whose run ended over (or under) the true total, of\n\
all the resets, and by how much those runs were over (or under) in all.\n",
        sim::true_total(30)
    )?;
    let mut head = format!("{:<18}{:>8}", "identifiers", "records");
    for s in &stores {
        head += &format!("  {:<22}", s.name());
    }
    writeln!(out, "{}", head.trim_end())?;
    for (row, cells) in &rows {
        let mut line = format!("{:<18}{:>8}", row_name(*row), cells[0].records);
        for c in cells {
            line += &format!("  {:<22}", c.text());
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    writeln!(
        out,
        "\nQoS 0 is sent once, with no acknowledgement and so no in-flight limit: the\n\
broker writes all 30 at once, and a reset loses every one the device had not read.\n\
QoS 1 and QoS 2 with the identifiers in RAM apply a message again when the reset\n\
falls after its record and before its acknowledgement; the message-id store skips\n\
it. QoS 2 with the identifiers in the effect's record needs no dedup in the store;\n\
`with next` writes each release in the next message's record (one a message, and\n\
one for each 4 releases the broker waits on). Against a real broker: idem mqtt\n\
consume (the book, docs/mqtt.md)."
    )?;
    Ok(())
}

/// The matrix as one JSON object: each row's QoS, identifiers, release and records, and
/// each store's cell.
fn print_json(
    out: &mut impl Write,
    stores: &[StoreKind],
    rows: &[(Row, Vec<Cell>)],
) -> anyhow::Result<()> {
    let rows: Vec<_> = rows
        .iter()
        .map(|(row, cells)| {
            let by_store: serde_json::Map<String, serde_json::Value> = stores
                .iter()
                .zip(cells)
                .map(|(s, c)| {
                    (s.name().to_string(), json!({
                        "resets": c.points, "over": c.over.0, "over_by": c.over.1,
                        "under": c.under.0, "under_by": c.under.1, "exact": c.over.0 + c.under.0 == 0,
                    }))
                })
                .collect();
            json!({
                "qos": row.0.level(),
                "identifiers": match (row.0.level(), row.1) {
                    (2, Keep::Ram) => "ram",
                    (2, Keep::Flash) => "flash",
                    _ => "none",
                },
                "release": if row.2 == Release::WithNext { "with-next" } else { "now" },
                "records": cells[0].records,
                "stores": by_store,
            })
        })
        .collect();
    writeln!(
        out,
        "{}",
        json!({ "source": "mqtt", "messages": 30, "true_total": sim::true_total(30), "in_flight": 4, "rows": rows })
    )?;
    Ok(())
}
