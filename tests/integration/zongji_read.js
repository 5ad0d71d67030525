// Reads the binlogsync binlog service with Node's @vlasky/zongji (tests/integration/test_binlog_service_protocol.py):
// prints one JSON line per row, exits 0 after `count` rows, 2 on an error, 3 on a timeout.
const ZongJi = require(process.env.ZONGJI || '@vlasky/zongji').default;
const [port, user, password, count] = process.argv.slice(2);
const zongji = new ZongJi({host: '127.0.0.1', port: Number(port), user, password});
let seen = 0;
zongji.on('binlog', evt => {
  const name = evt.getEventName();
  if (['writerows', 'updaterows', 'deleterows'].includes(name)) {
    for (const row of evt.rows) {
      console.log(JSON.stringify({event: name, table: evt.tableMap[evt.tableId].tableName, row},
        (k, v) => typeof v === 'bigint' ? v.toString() : v));
      seen += 1;
    }
    if (seen >= Number(count)) { zongji.stop(); }
  }
});
zongji.on('error', err => { console.error('ERROR', err.message); process.exit(2); });
zongji.on('stopped', () => process.exit(0));
zongji.start({startAtEnd: false, filename: 'hub-bin.000001', position: 4, includeEvents: ['tablemap', 'writerows', 'updaterows', 'deleterows']});
setTimeout(() => { console.error('TIMEOUT'); process.exit(3); }, 30000);
