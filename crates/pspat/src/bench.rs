pub struct BenchConfig; pub struct BenchReport; pub struct ArbiterReport; pub struct ClientReport; pub enum Mode{} pub struct Progress; pub struct VictimConfig; pub struct VictimReport;
