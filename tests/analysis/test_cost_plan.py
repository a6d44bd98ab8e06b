"""$/Mtok, price choice and capacity plans, against hand-computed values."""

from __future__ import annotations

import pytest

from analysis.cost import (
    PriceChoice,
    dollars_per_mtok,
    dollars_per_mtok_estimate,
    not_priced_line,
    price_choices,
    ran_on_a_priced_type,
    run_uptime_seconds,
)
from analysis.figures import RunFigures, run_figures
from analysis.intervals import Estimate
from analysis.load import LoadedRun, load_run
from analysis.plan import Targets, capacity, crossing, plan_for, rank
from analysis.prices import PriceBook, PriceQuote, given_quote
from analysis.step import StepFigures
from core.errors import UsageError
from core.rundir import MachineInfo, RigInfo


def quote(instance_type="g6.xlarge", market="on-demand", usd=0.8048, region="us-east-1", zone=None) -> PriceQuote:
    return PriceQuote(
        instance_type=instance_type,
        region=region,
        market=market,
        availability_zone=zone,
        usd_per_hour=usd,
        source="test",
        as_of="2027-01-01",
    )


def test_dollars_per_million_tokens_by_hand():
    # $0.8048/h at 100 tok/s: 360,000 tokens an hour -> 0.8048 / 0.36 = $2.2356 per million
    assert dollars_per_mtok(0.8048, 100.0) == pytest.approx(2.235556, rel=1e-6)
    # seed figure: 64 users on spot; $0.30/h at 300 tok/s -> 0.30 / 1.08 = $0.2778
    assert dollars_per_mtok(0.30, 300.0) == pytest.approx(0.277778, rel=1e-5)
    assert dollars_per_mtok(1.0, 0.0) is None
    assert dollars_per_mtok(1.0, None) is None


def test_cost_interval_comes_from_the_ends_of_the_throughput_interval():
    cost = dollars_per_mtok_estimate(0.36, Estimate(100.0, 80.0, 125.0, 10, "x"))
    # 0.36 $/h -> $1/Mtok at 100 tok/s; 125 tok/s -> 0.8; 80 tok/s -> 1.25
    assert (cost.low, cost.value, cost.high) == pytest.approx((0.8, 1.0, 1.25))


def test_a_local_rig_is_not_priced_unless_price_as_names_what_it_counts_as(kit):
    """No fake price: a machine that is no known type gets no $ figure (it used to be priced as g6.xlarge)."""
    book = PriceBook([quote(), quote(market="spot", usd=0.4)])
    manifest = kit.manifest("r", [kit.window()])
    warnings: list[str] = []
    assert price_choices(manifest, book, None, warnings) == [] and warnings == []
    assert not ran_on_a_priced_type(manifest)
    assert not_priced_line(manifest) == (
        "not priced: ran on an unnamed machine (no GPU recorded), not a known instance type; "
        "--price-as TYPE prices it as one, --usd-per-hour USD at a given hourly price"
    )
    choices = price_choices(manifest, book, ["g6.xlarge"], warnings)
    assert [(c.label, c.quote.usd_per_hour, c.basis) for c in choices] == [
        ("g6.xlarge on-demand (--price-as), measured on CPU", 0.8048, "price-as"),
        ("g6.xlarge spot (--price-as), measured on CPU", 0.4, "price-as"),
    ]
    # priced at the user's word, but the price is of a machine with an L4 and this one recorded no GPU
    assert warnings == [
        "priced as g6.xlarge (1x NVIDIA L4) as --price-as says, though it ran on an unnamed machine "
        "(no GPU recorded): the price is of other hardware"
    ]


def test_a_run_on_one_h200_is_priced_as_its_share_of_an_eight_gpu_instance(kit):
    h200 = RigInfo(kind="local", machine=MachineInfo(hostname="gpu", gpu_name="NVIDIA H200"))
    manifest = kit.manifest("r", [kit.window()], rig=h200)
    book = PriceBook([quote("p5en.48xlarge", usd=63.296)])
    warnings: list[str] = []
    (choice,) = price_choices(manifest, book, ["p5en.48xlarge"], warnings)
    assert choice.label == "per-GPU share (1/8) of p5en.48xlarge on-demand (--price-as), measured on NVIDIA H200"
    assert (choice.gpu_share, choice.basis) == (8, "price-as")
    assert choice.quote.usd_per_hour == pytest.approx(63.296 / 8)
    assert choice.quote.note == "per-GPU share: 1/8 of the instance's $63.2960/h"
    assert warnings == ["no spot price for p5en.48xlarge in us-east-1; left out"]  # its GPU is the type's: no warning
    assert not_priced_line(manifest).startswith("not priced: ran on gpu (NVIDIA H200), not a known instance type")


def test_hypothetical_types_extrapolate_any_run_and_say_so(kit):
    rig = RigInfo(kind="aws", instance_type="g6.xlarge", region="us-east-1")
    book = PriceBook([quote(), quote("g6e.xlarge", usd=1.861), quote("p5.48xlarge", usd=55.04)], given_quote(0.5))
    warnings: list[str] = []
    choices = price_choices(kit.manifest("r", [kit.window()], rig=rig), book, ["g6e.xlarge"], warnings,
                            ["g6.xlarge", "p5.48xlarge"])
    assert [c.label for c in choices] == [
        "g6.xlarge on-demand",  # what it ran on; hypothetical g6.xlarge would only repeat it
        "per-GPU share (1/8) of p5.48xlarge on-demand (hypothetical), measured on g6.xlarge",
    ]
    assert choices[1].quote.usd_per_hour == pytest.approx(6.88) and choices[1].hypothetical
    assert warnings == [
        "no spot price for g6.xlarge in us-east-1; run `rigbench prices fetch`",
        "--price-as g6e.xlarge not applied: the run ran on g6.xlarge (its manifest says so) and is priced as that",
        "--usd-per-hour 0.5 not applied: the run ran on g6.xlarge (its manifest says so) and is priced as that",
        "no spot price for p5.48xlarge in us-east-1; left out",
    ]


@pytest.mark.parametrize("flag", ["--price-as", "--hypothetical"])
def test_an_unknown_type_is_refused_naming_the_flag_and_the_known_types(kit, flag):
    arguments = {"price_as": ["h100"]}
    if flag == "--hypothetical":
        arguments = {"price_as": None, "hypothetical": ["g6.xlarge,h100"]}
    with pytest.raises(UsageError) as refused:
        price_choices(kit.manifest("r", [kit.window()]), PriceBook([]), warnings=[], **arguments)
    message = str(refused.value)
    assert message.startswith(f"{flag}: 'h100' is not an instance type rigbench knows; known: g4dn.xlarge, ")
    assert "p5en.48xlarge" in message and "\n" not in message and refused.value.exit_code == 2


def test_aws_run_uses_its_recorded_price_and_the_book_for_the_other_market(kit):
    rig = RigInfo(
        kind="aws",
        instance_type="g6.2xlarge",
        region="us-east-1",
        availability_zone="us-east-1d",
        market="spot",
        price_per_hour=0.41,
        price_source="describe_spot_price_history at launch",
        launch_time="2027-01-15T07:50:00+00:00",
    )
    book = PriceBook([quote("g6.2xlarge", usd=0.9776)])
    warnings: list[str] = []
    choices = price_choices(kit.manifest("r", [kit.window()], rig=rig), book, None, warnings)
    by_market = {c.quote.market: c for c in choices}
    assert by_market["spot"].quote.usd_per_hour == 0.41
    assert by_market["spot"].quote.source.startswith("run manifest (describe_spot_price_history")
    assert not by_market["spot"].hypothetical and by_market["spot"].basis == "recorded"
    assert [c.label for c in choices] == ["g6.2xlarge on-demand", "g6.2xlarge spot"]
    assert by_market["on-demand"].quote.usd_per_hour == 0.9776


def test_missing_price_is_a_warning_not_a_zero(kit):
    h100 = RigInfo(machine=MachineInfo(gpu_name="NVIDIA H100 80GB HBM3"))  # as nvidia-smi names it
    warnings: list[str] = []
    choices = price_choices(kit.manifest("r", [kit.window()], rig=h100), PriceBook([]), ["p5.48xlarge"], warnings)
    assert choices == []
    assert warnings == [
        "no on-demand price for p5.48xlarge in us-east-1; left out",
        "no spot price for p5.48xlarge in us-east-1; left out",
    ]


def test_price_book_prefers_the_zone_then_the_highest_quote():
    book = PriceBook(
        [quote(market="spot", usd=0.31, zone="us-east-1a"), quote(market="spot", usd=0.45, zone="us-east-1b")]
    )
    assert book.find("g6.xlarge", "us-east-1", "spot", "us-east-1a").usd_per_hour == 0.31
    highest = book.find("g6.xlarge", "us-east-1", "spot")
    assert highest.usd_per_hour == 0.45 and "highest of 2 quotes" in highest.note
    assert book.find("g6.xlarge", "eu-west-1", "spot") is None


def step(users: int, per_user: tuple, ttft_p90: tuple, aggregate: tuple, errors: int = 0) -> StepFigures:
    """A step with given (value, low, high) figures; per-user is the client median."""
    empty = Estimate(None, None, None, 0, "none")
    return StepFigures(
        index=users,
        users=users,
        context_tokens=0,
        window_start=0.0,
        window_end=60.0,
        requests=100,
        ok=100 - errors,
        errors={"http_500": errors} if errors else {},
        output_tokens=0.0,
        aggregate_tok_s=Estimate(*aggregate, 10, "x"),
        request_rate=1.0,
        server_tok_s=empty,
        server_tok_s_mean=empty,
        client_tok_s=Estimate(*per_user, 100, "x"),
        geomean_tok_s=empty,
        ttft_s={"p50": empty, "p90": Estimate(*ttft_p90, 100, "x"), "p99": empty},
        itl_s={},
        e2e_s={},
        draft_acceptance=empty,
        tokens_per_decode_step=None,
        server_counter_tok_s=None,
        completed_in_window=100 - errors,
        tpot_s={},
        rate=None,
        sent_rate=None,
        start_lag_s={},
        server_counter_granularity_tok_s=None,
        server_timings_tok_s=None,
        token_methods={},
        cut_counted_by_chunks=0,
        mean_in_flight=float(users),
        load_reached=1.0,
        window_seconds=60.0,
    )


SWEEP = [
    step(1, (130, 128, 132), (0.20, 0.18, 0.22), (130, 128, 132)),
    step(8, (100, 96, 104), (0.40, 0.35, 0.45), (800, 780, 820)),
    step(16, (60, 56, 64), (0.80, 0.70, 0.90), (960, 940, 980)),
]


def test_crossing_by_hand():
    # from (8, 96) to (16, 56): 50 is reached at 8 + (50 - 96) * 8 / (56 - 96) = 8 + 9.2 = 17.2
    assert crossing(8, 96, 16, 56, 50) == pytest.approx(17.2)
    assert crossing(8, 96, 16, 56, 76) == pytest.approx(12.0)


def test_plan_interpolates_conservatively_between_measured_steps():
    # min 76 tok/s: lower bounds 96 at 8 users, 56 at 16 -> crossing at 12 users
    # TTFT p90 <= 0.8 s: upper bounds 0.45 at 8, 0.90 at 16 -> 8 + (0.8 - 0.45) * 8 / 0.45 = 14.2
    cap = capacity(SWEEP, Targets(users=100, min_tok_s=76, ttft_p90_s=0.8))
    assert cap.users_per_instance == 12
    # aggregate lower bounds 780 at 8, 940 at 16 -> 780 + 160 * 4 / 8 = 860
    assert cap.aggregate_tok_s == pytest.approx(860)


def test_plan_stops_at_the_first_failure_and_never_extrapolates():
    assert capacity(SWEEP, Targets(100, 10, 5.0)).users_per_instance == 16
    assert "no extrapolation" in capacity(SWEEP, Targets(100, 10, 5.0)).basis
    assert capacity(SWEEP, Targets(100, 200, 5.0)).users_per_instance == 0
    with_errors = [*SWEEP[:2], step(16, (120, 118, 122), (0.3, 0.3, 0.3), (960, 940, 980), errors=3)]
    cap = capacity(with_errors, Targets(100, 76, 0.8))
    assert cap.users_per_instance == 8 and "errors at 16" in cap.basis


def test_plans_rank_by_dollars_per_hour(kit):
    run = LoadedRun(kit.root, kit.manifest("r", [kit.window()]), records=None)  # type: ignore[arg-type]
    figures = RunFigures(run, SWEEP)
    targets = Targets(users=100, min_tok_s=76, ttft_p90_s=0.8)
    on_demand = plan_for(figures, PriceChoice(quote(usd=0.8048), "hypothetical"), targets)
    spot = plan_for(figures, PriceChoice(quote(market="spot", usd=0.5), "hypothetical"), targets)
    # ceil(100 / 12) = 9 instances
    assert on_demand.instances == 9
    assert on_demand.usd_per_hour == pytest.approx(9 * 0.8048)
    assert spot.usd_per_mtok == pytest.approx(0.5 / (860 * 3600) * 1e6)
    assert rank([on_demand, spot]) == [spot, on_demand]


def test_run_cost_counts_from_the_rig_launch_including_setup(kit):
    rig = RigInfo(kind="aws", instance_type="g6.xlarge", region="us-east-1", launch_time="2027-01-15T07:50:00Z")
    path = kit.make_run("r", [kit.window()], {"p0": [kit.record("a", t_start=kit.T0 + 101)]}, rig=rig)
    warnings: list[str] = []
    seconds, basis = run_uptime_seconds(run_figures(load_run(path)), warnings)
    # launched 07:50, run ended 09:00 -> 70 minutes, setup and build included
    assert seconds == 70 * 60
    assert "setup and build included" in basis and warnings == []


def test_a_run_on_replicas_is_priced_as_the_share_of_the_gpus_it_used() -> None:
    from analysis.cost import gpu_share
    from core.rundir import RunManifest
    from core.rundir.models import ReplicaInfo, ServerInfo

    def placed(*gpus: int | None) -> RunManifest:
        replicas = [ReplicaInfo(index=i, url=f"http://127.0.0.1:{8080 + i}", slots=8, gpu=gpu)
                    for i, gpu in enumerate(gpus)]
        return RunManifest(run_id="r", created_at="2026-12-03T00:00:00+00:00", profile="p",
                           server=ServerInfo(args=[], host="127.0.0.1", port=8080, replicas=replicas))

    warnings: list[str] = []
    assert gpu_share(placed(), 8, "p5en.48xlarge", warnings) == 8, "one server: one GPU's share"
    assert gpu_share(placed(0, 1, 0, 1), 8, "p5en.48xlarge", warnings) == 4, "two GPUs used: a quarter"
    assert gpu_share(placed(0, 0), 8, "p5en.48xlarge", warnings) == 8, "replicas sharing one GPU: one GPU"
    assert warnings == []
    assert gpu_share(placed(0, 1, 2), 8, "p5en.48xlarge", warnings) == 1
    assert warnings == ["the run used 3 GPUs, which do not divide p5en.48xlarge's 8: priced as the whole instance"]


def test_a_4gpu_g_type_is_priced_by_the_gpus_the_run_used(kit) -> None:
    """Priced as a g6.12xlarge (4x L4): four replicas one per GPU, or one server split over the four GPUs it saw,
    are the whole instance; one replica per GPU on two GPUs is half; one GPU (a pinned replica, `-sm none`, or one
    `-dev`) a quarter. A run made on a g6.12xlarge is priced as the whole instance it rented, whatever it used."""
    from core.rundir.hardware import GpuDevice, HardwareInfo
    from core.rundir.models import ReplicaInfo, ServerInfo

    l4 = RigInfo(kind="local", machine=MachineInfo(hostname="box", gpu_name="NVIDIA L4"))
    book = PriceBook([quote("g6.12xlarge", usd=4.6016), quote("g6.12xlarge", market="spot", usd=2.0)])

    def priced(args: list[str], replica_gpus: list[int], sampled: int, rig: RigInfo = l4) -> list[tuple]:
        replicas = [ReplicaInfo(index=i, url=f"http://127.0.0.1:{8080 + i}", slots=16, gpu=gpu)
                    for i, gpu in enumerate(replica_gpus)]
        hardware = HardwareInfo(interval_s=0.1, gpus=[GpuDevice(index=i, name="NVIDIA L4", energy_counter=True)
                                                      for i in range(sampled)])
        manifest = kit.manifest("r", [kit.window()], rig=rig, hardware=hardware,
                                server=ServerInfo(args=args, host="127.0.0.1", port=8080, replicas=replicas))
        warnings: list[str] = []
        choices = price_choices(manifest, book, ["g6.12xlarge"], warnings)
        assert warnings == [], warnings
        return [(c.label, round(c.quote.usd_per_hour, 4)) for c in choices]

    on = ", measured on NVIDIA L4"
    whole = [("g6.12xlarge on-demand (--price-as)" + on, 4.6016), ("g6.12xlarge spot (--price-as)" + on, 2.0)]
    quarter = [("per-GPU share (1/4) of g6.12xlarge on-demand (--price-as)" + on, 1.1504),
               ("per-GPU share (1/4) of g6.12xlarge spot (--price-as)" + on, 0.5)]
    assert priced([], [0, 1, 2, 3], 4) == whole, "one replica per GPU"
    assert priced(["-sm", "layer"], [], 4) == whole, "one server split by layer over the four GPUs it saw"
    assert priced(["--split-mode", "row"], [], 4) == whole
    assert priced([], [0, 1, 0, 1], 2)[0] == ("per-GPU share (1/2) of g6.12xlarge on-demand (--price-as)" + on, 2.3008)
    assert priced([], [0], 1) == priced(["-sm", "none"], [], 4) == priced(["-dev", "CUDA0"], [], 4) == quarter
    assert priced(["-dev", "CUDA0,CUDA1", "-sm", "none"], [], 4) == quarter, "-sm none: the main GPU only"
    half = "per-GPU share (1/2) of g6.12xlarge on-demand (--price-as)" + on
    assert priced(["-dev", "CUDA0,CUDA1"], [], 4)[0][0] == half
    assert priced([], [], 0) == quarter, "nothing says more than one GPU"
    on_the_type = RigInfo(kind="aws", instance_type="g6.12xlarge", region="us-east-1")
    assert priced([], [0], 1, rig=on_the_type) == [("g6.12xlarge on-demand", 4.6016), ("g6.12xlarge spot", 2.0)]


def test_a_run_on_more_gpus_than_the_type_has_is_priced_as_the_whole_instance_and_said() -> None:
    from analysis.cost import gpu_share
    from core.rundir import RunManifest
    from core.rundir.models import ReplicaInfo, ServerInfo

    replicas = [ReplicaInfo(index=i, url=f"http://127.0.0.1:{8080 + i}", slots=8, gpu=i) for i in range(8)]
    manifest = RunManifest(run_id="r", created_at="2026-12-03T00:00:00+00:00", profile="p",
                           server=ServerInfo(args=[], host="127.0.0.1", port=8080, replicas=replicas))
    warnings: list[str] = []
    assert gpu_share(manifest, 4, "g6.12xlarge", warnings) == 1
    assert gpu_share(manifest, 8, "g6.48xlarge", warnings) == 1
    assert warnings == ["the run used 8 GPUs, more than g6.12xlarge's 4: priced as the whole instance"]
