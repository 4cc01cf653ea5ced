"""What every example shares in how it reports: the progress-monitor options and the
accuracy line (percent, as MATLAB's training tables give it)."""


def add_monitor_arguments(parser, plot=True):
    """``--monitor terminal|web``, ``--monitor-port``, ``--log-dir`` (and ``--plot``)."""
    parser.add_argument("--monitor", choices=["terminal", "web"], default="terminal",
                        help="where to watch the training: the terminal (a live view), or "
                             "also a browser page with live charts and a Stop button, "
                             "whose address worker 1 prints (terminal)")
    parser.add_argument("--monitor-port", type=int, default=0,
                        help="port of the browser page on 127.0.0.1 (0: a free one)")
    if plot:
        parser.add_argument("--plot", default="default",
                            help="training-progress plot written by worker 1, or 'none' "
                                 "(default: runs/<script>-<date>-<time>/"
                                 "training-progress.png)")
    parser.add_argument("--log-dir", default=None,
                        help="write metrics.csv (and TensorBoard events) there")


def monitor_options(args):
    """Keyword arguments of TrainingProgressMonitor from the parsed arguments."""
    plot = getattr(args, "plot", "default")
    return {"plot_file": None if plot in ("none", "") else plot, "log_dir": args.log_dir,
            "web": args.monitor_port if args.monitor == "web" else None}


def accuracy_line(correct, total):
    """The last line of every example: ``accuracy = 97.78%``."""
    return f"accuracy = {100.0 * correct / total:.2f}%"
