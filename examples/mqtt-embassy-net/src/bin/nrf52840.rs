//! The receiver on an nRF52840 (nRF52840-DK, nRF52840 Dongle): embassy-net over the
//! chip's USB as a CDC-NCM Ethernet adapter (the computer it is plugged into gives it an
//! address by DHCP), idem-mqtt's session in the top 4 pages of the chip's flash through
//! embassy-nrf's `Nvmc`. Each PUBLISH decided and each connection's end is logged with
//! defmt.
#![no_std]
#![no_main]

use defmt::{info, unwrap, warn};
use embassy_executor::Spawner;
use embassy_net::tcp::TcpSocket;
use embassy_net::{Ipv4Address, Stack, StackResources};
use embassy_nrf::Peri;
use embassy_nrf::nvmc::Nvmc;
use embassy_nrf::peripherals::{RNG, USBD};
use embassy_nrf::rng::{self, Rng};
use embassy_nrf::usb::vbus_detect::{self, HardwareVbusDetect};
use embassy_nrf::usb::{self, Driver};
use embassy_nrf::{bind_interrupts, config::HfclkSource};
use embassy_time::{Duration, Timer};
use embassy_usb::class::cdc_ncm::embassy_net::{Device, Runner, State as NetState};
use embassy_usb::class::cdc_ncm::{CdcNcmClass, State};
use embassy_usb::{Builder, UsbDevice};
use idem_core::journal::Region;
use idem_example_mqtt_embassy_net::net::Tcp;
use idem_example_mqtt_embassy_net::{End, JOURNAL_PAGES, Seen, Session, Settings};
use idem_mqtt::client::backoff_ms;
use static_cell::StaticCell;
use {defmt_rtt as _, panic_probe as _};

bind_interrupts!(struct Irqs {
    USBD => usb::InterruptHandler<USBD>;
    CLOCK_POWER => vbus_detect::InterruptHandler;
    RNG => rng::InterruptHandler<RNG>;
});

/// The broker: the computer at the other end of the USB cable, as NetworkManager's
/// "shared to other computers" connection addresses itself. Change it for another.
const BROKER: (Ipv4Address, u16) = (Ipv4Address::new(10, 42, 0, 1), 1883);

/// The session: the client id the broker keeps it under, and the payments' topic.
const SETTINGS: Settings<'static> = Settings {
    client_id: "idem-nrf52840",
    filter: "idem/payments",
    tag: 0x6E52_4D51,
};

/// The receiver's journal: the 4 pages above memory.x's FLASH (0xFC000..0x100000).
const JOURNAL: Region = Region {
    start: 0x10_0000 - JOURNAL_PAGES * 4096,
    pages: JOURNAL_PAGES,
};

/// Ethernet frames over USB.
const MTU: usize = 1514;

type UsbDriver = Driver<'static, HardwareVbusDetect>;

#[embassy_executor::task]
async fn usb_task(mut device: UsbDevice<'static, UsbDriver>) -> ! {
    device.run().await
}

#[embassy_executor::task]
async fn ncm_task(runner: Runner<'static, UsbDriver, MTU>) -> ! {
    runner.run().await
}

#[embassy_executor::task]
async fn net_task(mut runner: embassy_net::Runner<'static, Device<'static, MTU>>) -> ! {
    runner.run().await
}

/// The network: embassy-net over the chip's USB as a CDC-NCM Ethernet adapter, its
/// address from DHCP; returns once the address is up.
async fn network(
    spawner: &Spawner,
    usbd: Peri<'static, USBD>,
    rng: Peri<'static, RNG>,
) -> Stack<'static> {
    let driver = Driver::new(usbd, Irqs, HardwareVbusDetect::new(Irqs));
    let mut usb_config = embassy_usb::Config::new(0xc0de, 0xcafe);
    usb_config.manufacturer = Some("idem");
    usb_config.product = Some("idem MQTT receiver");
    usb_config.max_power = 100;
    usb_config.max_packet_size_0 = 64;
    static DESCRIPTORS: StaticCell<[[u8; 256]; 3]> = StaticCell::new();
    static CONTROL: StaticCell<[u8; 128]> = StaticCell::new();
    let [config_descriptor, bos_descriptor, msos_descriptor] = DESCRIPTORS.init([[0; 256]; 3]);
    let mut builder = Builder::new(
        driver,
        usb_config,
        config_descriptor,
        bos_descriptor,
        msos_descriptor,
        CONTROL.init([0; 128]),
    );
    // The MAC the computer's end of the link takes, then the board's own.
    static NCM: StaticCell<State> = StaticCell::new();
    let class = CdcNcmClass::new(
        &mut builder,
        NCM.init(State::new()),
        [0x02, 0, 0, 0, 0, 0x88],
        64,
    );
    spawner.spawn(unwrap!(usb_task(builder.build())));
    static NET: StaticCell<NetState<MTU, 4, 4>> = StaticCell::new();
    let (runner, device) = class
        .into_embassy_net_device::<MTU, 4, 4>(NET.init(NetState::new()), [0x02, 0, 0, 0, 0, 0xCC]);
    spawner.spawn(unwrap!(ncm_task(runner)));

    let mut rng = Rng::new(rng, Irqs);
    let mut seed = [0; 8];
    rng.blocking_fill_bytes(&mut seed);
    static RESOURCES: StaticCell<StackResources<2>> = StaticCell::new();
    let (stack, runner) = embassy_net::new(
        device,
        embassy_net::Config::dhcpv4(Default::default()),
        RESOURCES.init(StackResources::new()),
        u64::from_le_bytes(seed),
    );
    spawner.spawn(unwrap!(net_task(runner)));
    stack.wait_config_up().await;
    info!("address: {}", stack.config_v4().map(|c| c.address));

    stack
}

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let mut config = embassy_nrf::config::Config::default();
    // USB needs the crystal.
    config.hfclk_source = HfclkSource::ExternalXtal;
    let p = embassy_nrf::init(config);
    let mut flash = Nvmc::new(p.NVMC);
    let mut session = match Session::open(&mut flash, JOURNAL, SETTINGS) {
        Ok(s) => s,
        Err(e) => defmt::panic!("the receiver's journal does not open: {}", e),
    };
    info!(
        "boot: total {}, {} applied, session begun: {}",
        session.total(),
        session.figures().applied,
        session.client().resumed
    );

    let stack = network(&spawner, p.USBD, p.RNG).await;

    let (mut rx, mut tx) = ([0u8; 1024], [0u8; 1024]);
    let mut failures = 0u32;
    loop {
        let mut socket = TcpSocket::new(stack, &mut rx, &mut tx);
        let end = match socket.connect(BROKER).await {
            Ok(()) => {
                let mut seen = |s: Seen<'_>| match s {
                    Seen::Arrived(p) => {
                        info!("PUBLISH {} (pid {}, dup {})", p.payload, p.pid, p.dup)
                    }
                    Seen::Decided(pid, d) => info!("{} (pid {})", d, pid),
                };
                let mut link = Tcp {
                    socket: &mut socket,
                };
                Some(session.connection(&mut flash, &mut link, &mut seen).await)
            }
            Err(e) => {
                warn!("no connection to the broker: {}", e);
                None
            }
        };
        socket.abort();
        let _ = socket.flush().await;
        match end {
            Some(End::Flash(e)) => defmt::panic!("the receiver's flash failed: {}", e),
            Some(End::Resend) => failures = 0,
            Some(end) => {
                warn!("connection ended: {}; total {}", end, session.total());
                failures += 1;
            }
            None => failures += 1,
        }
        Timer::after(Duration::from_millis(u64::from(backoff_ms(failures)))).await;
    }
}
